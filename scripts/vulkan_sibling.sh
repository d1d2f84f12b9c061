#!/usr/bin/env bash
# The Vulkan build of a pinned tree whose ggml-vulkan, ggml-cpu, backend registry and public headers
# are byte for byte those of another pinned tree that has a Vulkan build (b10524 and b10531: the #23321
# fix is in ggml-base, the rest of their difference in libllama): that build's Vulkan, CPU and registry
# libraries, with this tree's own libggml-base, libllama and programs from its CPU build. One Vulkan
# build (its shaders are most of an hour on 2 cores) then serves both trees. Where the sources differ,
# the tree is built in full instead.
# usage: vulkan_sibling.sh BUILD FROM      e.g. vulkan_sibling.sh b10524 b10531 -> build/llama-b10524-vulkan/bin
set -euo pipefail
b=$1; from=$2
here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/build/src/llama-$b/llama.cpp; other=$here/build/src/llama-$from/llama.cpp
out=$here/build/llama-$b-vulkan
same() { diff -rq --exclude=CMakeLists.txt "$src/$1" "$other/$1" >/dev/null; }
if ! { same ggml/src/ggml-vulkan && same ggml/src/ggml-cpu && same ggml/src/ggml-backend-reg.cpp && same ggml/include; }; then
  echo "vulkan_sibling: $b's Vulkan, CPU or registry sources differ from $from's: building $b's Vulkan tree in full"
  TARGETS="llama-simple llama-completion" "$here/scripts/build_llama.sh" "$src" "$out" -DGGML_VULKAN=ON -DGGML_RPC=OFF \
    -DVulkan_INCLUDE_DIR="$here/build/vulkan-headers/usr/include"
  exit 0
fi
rm -rf "$out/bin" && mkdir -p "$out/bin"
cp -a "$here/build/llama-$from-vulkan/bin"/lib{ggml,ggml-cpu,ggml-vulkan}.so* "$out/bin/"
# the CPU build's programs and libraries find their neighbours through RUNPATH $ORIGIN (build_llama.sh)
cp -a "$here/build/llama-$b/bin"/lib{ggml-base,llama,llama-common}.so* "$here/build/llama-$b/bin"/libllama-completion-impl.so \
  "$here/build/llama-$b/bin"/llama-{completion,simple} "$out/bin/"
echo "vulkan_sibling: build/llama-$b-vulkan/bin from build/llama-$from-vulkan (Vulkan, CPU, registry) and build/llama-$b (the rest)"
