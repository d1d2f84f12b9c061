#!/usr/bin/env bash
# Build the hook library against a ggml source tree and put it beside that build's libggml-base.so,
# where `ggml-trace record` finds it.
# usage: build_hooks.sh SOURCE_DIR GGML_LIB_DIR [NAME [OUT_DIR]]
#   SOURCE_DIR   the llama.cpp (or ggml) checkout the program's ggml was built from
#   GGML_LIB_DIR the directory holding that build's libggml-base.so
#   OUT_DIR      where the libraries and programs go (default: GGML_LIB_DIR)
#   GGML_TRACE_WORK (env) the CMake build folder (default: build/hooks-NAME beside this script's tree)
set -euo pipefail
src=$1; libdir=$2; name=${3:-$(basename "$src")}; outdir=${4:-$libdir}
here=$(cd "$(dirname "$0")/.." && pwd)
work=${GGML_TRACE_WORK:-$here/build/hooks-$name}
mkdir -p "$(dirname "$work")" "$outdir"
cmake -S "$here" -B "$work" -DGGML_SOURCE_DIR="$(realpath "$src")" -DGGML_TRACE_BUILD_NAME="$name" -DGGML_LIB_DIR="$(realpath "$libdir")" >"$work.configure.log" 2>&1 \
  || { cat "$work.configure.log"; exit 1; }
cmake --build "$work" -j "${JOBS:-$(nproc)}" >"$work.build.log" 2>&1 || { cat "$work.build.log"; exit 1; }
cp "$work/libggml-trace-hooks.so" "$outdir/libggml-trace-hooks.so"
cp "$work/libggml-trace-vdev.so" "$outdir/libggml-trace-vdev.so"  # virtual devices, beside the hooks
# the scenario and test programs built against this ggml, when GGML_LIB_DIR let CMake build them
for p in ggml-trace-scenarios sched-loop many-scheds test-backend-sched-copy-slot; do
  [ -f "$work/$p" ] && cp "$work/$p" "$outdir/$p"
done
true
