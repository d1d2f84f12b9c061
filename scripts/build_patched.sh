#!/usr/bin/env bash
# Build a pinned llama.cpp tree with a patch from patches/ applied: only ggml (base, CPU, RPC), the
# hooks and the scenario programs, into build/llama-bNNNNN-NAME/bin, where `ggml-trace scenario
# --build bNNNNN-NAME` and `ggml-trace record --build bNNNNN-NAME` find them. Programs of the
# unpatched build (llama-completion) run on it with LD_LIBRARY_PATH=build/llama-bNNNNN-NAME/bin:
# a ggml patch changes no ABI. A patch to llama.cpp itself builds its programs too (TARGETS, env).
# usage: build_patched.sh BUILD PATCH NAME      e.g. build_patched.sh b10531 patches/meta-allreduce-scratch.patch tpfix
set -euo pipefail
build=$1; patch=$2; name=$3
here=$(cd "$(dirname "$0")/.." && pwd)
dst=$("$here/scripts/patched_tree.sh" "$build" "$patch" "$name")
TARGETS="${TARGETS:-ggml}" "$here/scripts/build_llama.sh" "$dst" "$here/build/llama-$build-$name"
"$here/scripts/build_hooks.sh" "$dst" "$here/build/llama-$build-$name/bin" "$build-$name"
