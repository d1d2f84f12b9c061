#!/usr/bin/env bash
# Build a pinned llama.cpp tree with a patch from patches/ applied: only ggml (base, CPU, RPC), the
# hooks and the scenario programs, into build/llama-bNNNNN-NAME/bin, where `ggml-trace scenario
# --build bNNNNN-NAME` and `ggml-trace record --build bNNNNN-NAME` find them. Programs of the
# unpatched build (llama-completion) run on it with LD_LIBRARY_PATH=build/llama-bNNNNN-NAME/bin:
# the patch changes no ABI.
# usage: build_patched.sh BUILD PATCH NAME      e.g. build_patched.sh b10531 patches/meta-allreduce-scratch.patch tpfix
set -euo pipefail
build=$1; patch_file=$(realpath "$2"); name=$3
here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/build/src/llama-$build/llama.cpp
dst=$here/build/src/llama-$build-$name/llama.cpp
[ -d "$src" ] || { echo "no $src: run make setup first" >&2; exit 1; }
if [ ! -f "$dst/.patched" ] || [ "$patch_file" -nt "$dst/.patched" ]; then
  rm -rf "$dst" && mkdir -p "$(dirname "$dst")"
  cp -al "$src" "$dst"  # hard links: cheap; patch writes the files it changes anew
  (cd "$dst" && patch -p1 --quiet --no-backup-if-mismatch < "$patch_file")
  touch "$dst/.patched"
fi
TARGETS="ggml" "$here/scripts/build_llama.sh" "$dst" "$here/build/llama-$build-$name"
"$here/scripts/build_hooks.sh" "$dst" "$here/build/llama-$build-$name/bin" "$build-$name"
