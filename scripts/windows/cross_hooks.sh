#!/usr/bin/env bash
# cross_hooks.sh SRC BIN NAME: the hooks (ggml-trace-hooks.dll), the virtual devices
# (ggml-trace-vdev.dll), the launcher (ggml-trace-launch.exe), the scenario program
# (ggml-trace-scenarios.exe) and the capture tests' sched-loop.exe built for Windows with MinGW-w64
# against the llama.cpp tree SRC, beside the Windows ggml in BIN (cross_ggml.sh's), as build NAME
# (docs/windows.md).
set -euo pipefail
src=$(realpath "$1"); bin=$(realpath "$2"); name=$3
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
work=${GGML_TRACE_WORK:-$root/build/win/hooks-$name}
# the test programs link ggml's DLLs, the CPU backend's among them: only a build with it linked in (a
# build that loads its backends, GGML_BACKEND_DL, gets the hooks alone)
programs=()
[ -f "$bin/ggml-cpu.dll" ] && programs=(-DGGML_LIB_DIR="$bin")
mkdir -p "$(dirname "$work")"
cmake -S "$root" -B "$work" -DCMAKE_TOOLCHAIN_FILE="$here/mingw-w64.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_SOURCE_DIR="$src" -DGGML_TRACE_BUILD_NAME="$name" "${programs[@]}" -DGGML_TRACE_NO_CUPTI=ON \
  > "$work.configure.log" 2>&1 || { tail -30 "$work.configure.log"; exit 1; }
cmake --build "$work" -j "${JOBS:-2}" > "$work.build.log" 2>&1 || { tail -40 "$work.build.log"; exit 1; }
for f in ggml-trace-hooks.dll ggml-trace-vdev.dll ggml-trace-launch.exe ggml-trace-scenarios.exe sched-loop.exe; do
  [ -f "$work/$f" ] && cp -f "$work/$f" "$bin/"
done
true
