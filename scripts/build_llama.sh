#!/usr/bin/env bash
# Build the pieces of one llama.cpp tree that ggml-trace needs: ggml (CPU + RPC, shared),
# libllama, llama-simple, llama-completion, llama-bench and ggml-rpc-server.
# usage: build_llama.sh SOURCE_DIR BUILD_DIR [extra cmake args...]
#   TARGETS (env) overrides the list of targets built.
set -euo pipefail
src=$1; out=$2; shift 2
jobs=${JOBS:-$(nproc)}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# The tree's own identity (scripts/source_identity.sh): llama.cpp's CMake asks git, which for a
# tree without a repository of its own would answer with an enclosing one (this project's).
identity=()
read -r number commit how < <(bash "$(dirname "$0")/source_identity.sh" "$src")
if [ "$how" = sdist ] || [ "$how" = none ]; then  # not a git checkout of its own
  export GIT_CEILING_DIRECTORIES=$(dirname "$(realpath "$src")")
  identity=(-DLLAMA_BUILD_NUMBER="$number" -DLLAMA_BUILD_COMMIT="$commit")
fi
# For the trees the set-up fetches (build/src/NAME/llama.cpp) the CMake folder sits beside the sources,
# build/src/NAME/cmake-BUILD, at the same depth for every tree: with CCACHE_BASEDIR (the Makefile's), a
# file that is the same in two trees (two pinned builds, a patched copy) then has the same relative paths
# in its compile, and compiles once (llama.cpp puts its results in the CMake folder's bin/). Other trees
# build in BUILD_DIR.
here=$(cd "$(dirname "$0")/.." && pwd)
work=$out
case "$(realpath "$src")" in "$here"/build/src/*) work=$(dirname "$(realpath "$src")")/cmake-$(basename "$out") ;; esac
[ -d "$out" ] && [ ! -L "$out" ] && work=$out  # a build folder of the earlier layout: built in place
if [ "$work" != "$out" ]; then  # BUILD_DIR stays where it is looked for, a link to the CMake folder
  mkdir -p "$work"
  # relative to the folder holding the link (not through the link: a second build of the tree finds it made)
  ln -sfn "$(realpath --relative-to="$(realpath -m "$(dirname "$out")")" "$work")" "$out"
fi
server=OFF  # llama-server only where asked for (TARGETS): it is the longest to build
case " ${TARGETS:-} " in *" llama-server "*) server=ON ;; esac
# RUNPATH $ORIGIN: a program or library finds its neighbours in its own folder, wherever the folder is
# copied (scripts/vulkan_sibling.sh puts a CPU build's programs beside another build's Vulkan libraries).
cmake -S "$src" -B "$work" -G "Unix Makefiles" "${identity[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DGGML_RPC=ON -DGGML_CCACHE=OFF "${launcher[@]}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF \
  -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
  "$@" >"$out.configure.log" 2>&1 || { cat "$out.configure.log"; exit 1; }
cmake --build "$work" -j "$jobs" --target ${TARGETS:-llama-simple llama-completion llama-bench ggml-rpc-server}
