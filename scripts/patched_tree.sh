#!/usr/bin/env bash
# A pinned llama.cpp tree with a patch from patches/ applied, made once (again when the patch is newer):
# build/src/llama-BUILD-NAME/llama.cpp, hard links to build/src/llama-BUILD/llama.cpp but for the files
# the patch changes. Prints its path.
# usage: patched_tree.sh BUILD PATCH NAME      e.g. patched_tree.sh b10531 patches/meta-allreduce-scratch.patch tpfix
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
echo "$dst"
