#!/usr/bin/env bash
# Put a patched libggml-base beside an existing build's programs, for patches that touch libggml-base
# alone (the scheduler, ggml-backend.cpp): only that library is built (a minute, not a Vulkan build's
# shaders), into build/llama-TREE-NAME/bin, with the hooks, the virtual devices and the scenario
# program of build/llama-TREE/bin (compiled against the same headers: the patch changes no ABI).
# `ggml-trace record --build TREE-NAME` and `scenario --build ...` put that folder first on the
# library path, so the tree's own programs run on the patched scheduler and the tree's backends.
# usage: build_patched_base.sh BUILD TREE PATCH NAME   e.g. build_patched_base.sh b10531 b10531-vulkan patches/pipeline-host-reads.patch ppfix
#   -> build/llama-b10531-vulkan-ppfix/bin
set -euo pipefail
build=$1; tree=$2; patch=$3; name=$4
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/build/llama-$tree-$name
[ -f "$here/build/llama-$tree/bin/libggml-trace-hooks.so" ] || { echo "no build/llama-$tree: run make setup first" >&2; exit 1; }
dst=$("$here/scripts/patched_tree.sh" "$build" "$patch" "$name")
TARGETS=ggml-base "$here/scripts/build_llama.sh" "$dst" "$out" -DGGML_RPC=OFF
for f in libggml-trace-hooks.so libggml-trace-vdev.so ggml-trace-scenarios; do
  [ -f "$here/build/llama-$tree/bin/$f" ] && cp "$here/build/llama-$tree/bin/$f" "$out/bin/$f"
done
true
