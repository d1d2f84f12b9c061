#!/usr/bin/env bash
# cross_ggml.sh SRC OUT [CMAKE_ARGS...]: the ggml of a llama.cpp tree (SRC/ggml) built for Windows with
# MinGW-w64 into OUT/bin (ggml-base.dll, ggml-cpu.dll, ggml.dll and MinGW's runtime DLLs): shared, the
# CPU backend linked in (GGML_BACKEND_DL off), no OpenMP, no native CPU tuning (docs/windows.md);
# CMAKE_ARGS come last and so win (cross_llama.sh: -DGGML_BACKEND_DL=ON).
set -euo pipefail
src=$(realpath "$1"); out=$(realpath -m "$2"); shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
[ -f "$src/ggml/ggml.pc.in" ] || touch "$src/ggml/ggml.pc.in"  # the sdists' ggml lacks it; CMake configures it
# mingw-w64's headers (10.0) lack THREAD_POWER_THROTTLING_STATE, which ggml-cpu uses past Windows 7
cmake -S "$src/ggml" -B "$out/cmake" -DCMAKE_TOOLCHAIN_FILE="$here/mingw-w64.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
  -DGGML_BACKEND_DL=OFF -DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0601 -DCMAKE_CXX_FLAGS=-D_WIN32_WINNT=0x0601 "$@" \
  > "$out.configure.log" 2>&1 \
  || { tail -30 "$out.configure.log"; exit 1; }
cmake --build "$out/cmake" -j "${JOBS:-2}" > "$out.build.log" 2>&1 || { tail -40 "$out.build.log"; exit 1; }
mkdir -p "$out/bin"
cp -f "$out"/cmake/bin/*.dll "$out/bin/"
# the MinGW runtime beside the DLLs (a Windows program finds DLLs in its own folder first)
for dll in libstdc++-6.dll libgcc_s_seh-1.dll libwinpthread-1.dll; do
  cp -f "$(x86_64-w64-mingw32-g++-posix -print-file-name=$dll)" "$out/bin/"
done
ls "$out/bin"
