#!/usr/bin/env bash
# Install what a ggml Vulkan build and its runs on Mesa's lavapipe need, and unpack Vulkan headers
# new enough for ggml-vulkan (>= 1.3.272: it uses VK_EXT_layer_settings) into DEST.
# Debian 12 ships 1.3.239 headers, so the headers come from Debian 13's libvulkan-dev, downloaded
# through a private apt state (nothing of Debian 13 is installed; the system's apt set-up is untouched).
# usage: setup_vulkan.sh DEST        -> DEST/usr/include/vulkan/vulkan_core.h
set -euo pipefail
dest=$1
need=()
command -v glslc >/dev/null || need+=(glslc)
[ -f /usr/include/spirv/unified1/spirv.hpp ] || need+=(spirv-headers)
ls /usr/lib/*/libvulkan.so >/dev/null 2>&1 || need+=(libvulkan-dev)
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ -f "$dest/usr/include/vulkan/vulkan_core.h" ]; then exit 0; fi
if [ -f /usr/include/vulkan/vulkan_core.h ] &&
   [ "$(awk '/define VK_HEADER_VERSION /{print $3}' /usr/include/vulkan/vulkan_core.h)" -ge 272 ] &&
   grep -q 'define VK_API_VERSION_1_3' /usr/include/vulkan/vulkan_core.h; then
  mkdir -p "$dest/usr" && ln -sfn /usr/include "$dest/usr/include"   # the system's are new enough
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-trixie-stable.gpg] http://deb.debian.org/debian trixie main" >"$work/sources.list"
opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
      -o Dir::State::Lists="$work/lists" -o Dir::Cache::Archives="$work/archives"
      -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Get::List-Cleanup=0
      -o APT::Sandbox::User=root)  # the private state lives in a root-only temporary folder
apt-get "${opts[@]}" update -qq
(cd "$work" && apt-get "${opts[@]}" download libvulkan-dev >/dev/null)
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
dpkg-deb -x "$work"/libvulkan-dev_*.deb "$dest.tmp"
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "Vulkan headers $(awk '/define VK_HEADER_VERSION /{print $3}' "$dest/usr/include/vulkan/vulkan_core.h") in $dest/usr/include"
