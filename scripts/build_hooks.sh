#!/usr/bin/env bash
# Build the hook library against a ggml source tree and put it beside that build's libggml-base.so,
# where `ggml-trace record` finds it.
# usage: build_hooks.sh SOURCE_DIR GGML_LIB_DIR [NAME]
#   SOURCE_DIR   the llama.cpp (or ggml) checkout the program's ggml was built from
#   GGML_LIB_DIR the directory holding that build's libggml-base.so
set -euo pipefail
src=$1; libdir=$2; name=${3:-$(basename "$src")}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$here/build/hooks-$name
mkdir -p "$here/build"
cmake -S "$here" -B "$work" -DGGML_SOURCE_DIR="$(realpath "$src")" -DGGML_TRACE_BUILD_NAME="$name" -DGGML_LIB_DIR="$(realpath "$libdir")" >"$work.configure.log" 2>&1 \
  || { cat "$work.configure.log"; exit 1; }
cmake --build "$work" -j "${JOBS:-$(nproc)}" >"$work.build.log" 2>&1 || { cat "$work.build.log"; exit 1; }
cp "$work/libggml-trace-hooks.so" "$libdir/libggml-trace-hooks.so"
cp "$work/libggml-trace-vdev.so" "$libdir/libggml-trace-vdev.so"  # virtual devices, beside the hooks
# the scenario and test programs built against this ggml, when GGML_LIB_DIR let CMake build them
for p in ggml-trace-scenarios sched-loop; do
  [ -f "$work/$p" ] && cp "$work/$p" "$libdir/$p"
done
true
