#!/usr/bin/env bash
# A pinned llama.cpp tree with a patch from patches/ applied, made once (again when the patch is newer):
# build/src/llama-BUILD-NAME/llama.cpp, hard links to build/src/llama-BUILD/llama.cpp but for the files
# the patch changes. Prints its path. PATCH may be several, A.patch:B.patch, applied in that order.
# usage: patched_tree.sh BUILD PATCH NAME      e.g. patched_tree.sh b10531 patches/meta-allreduce-scratch.patch tpfix
set -euo pipefail
build=$1; name=$3
IFS=: read -r -a given <<< "$2"
patch_files=(); for p in "${given[@]}"; do patch_files+=("$(realpath "$p")"); done
here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/build/src/llama-$build/llama.cpp
dst=$here/build/src/llama-$build-$name/llama.cpp
[ -d "$src" ] || { echo "no $src: run make setup first" >&2; exit 1; }
stale=false
for p in "${patch_files[@]}"; do [ "$p" -nt "$dst/.patched" ] && stale=true; done
if [ ! -f "$dst/.patched" ] || $stale; then
  rm -rf "$dst" && mkdir -p "$(dirname "$dst")"
  cp -al "$src" "$dst"  # hard links: cheap; patch writes the files it changes anew
  for p in "${patch_files[@]}"; do
    (cd "$dst" && patch -p1 --quiet --no-backup-if-mismatch < "$p")
  done
  touch "$dst/.patched"
fi
echo "$dst"
