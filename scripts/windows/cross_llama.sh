#!/usr/bin/env bash
# cross_llama.sh SRC OUT: llama-completion.exe of the llama.cpp tree SRC as llama.cpp's Windows
# releases lay it out, cross-built with MinGW-w64 into OUT/bin (docs/windows.md): ggml with
# GGML_BACKEND_DL on (the CPU backend a DLL that the program's ggml_backend_load_all() loads, and
# GGML_BACKEND_PATH's hooks with it), libllama, llama.cpp's common library and the program, with
# MinGW's runtime DLLs. The hooks go beside it separately (the Makefile copies cross_hooks.sh's).
set -euo pipefail
src=$(realpath "$1"); out=$(realpath -m "$2")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
toolchain=(-DCMAKE_TOOLCHAIN_FILE="$here/mingw-w64.cmake" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON)
[ -f "$src/ggml/ggml.pc.in" ] || touch "$src/ggml/ggml.pc.in"  # the sdists' ggml lacks it; CMake configures it
# ggml as cross_ggml.sh builds it (Windows 7 APIs: mingw-w64 10's headers lack what ggml-cpu uses past
# them), but loading its backends; installed, for llama.cpp's CMake to find
cmake -S "$src/ggml" -B "$out/ggml" "${toolchain[@]}" -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_BUILD_TESTS=OFF \
  -DGGML_BUILD_EXAMPLES=OFF -DGGML_BACKEND_DL=ON -DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0601 \
  -DCMAKE_CXX_FLAGS=-D_WIN32_WINNT=0x0601 > "$out/ggml.configure.log" 2>&1 || { tail -30 "$out/ggml.configure.log"; exit 1; }
cmake --build "$out/ggml" -j "${JOBS:-2}" > "$out/ggml.build.log" 2>&1 || { tail -40 "$out/ggml.build.log"; exit 1; }
cmake --install "$out/ggml" --prefix "$out/ggml-install" > "$out/ggml.install.log" 2>&1 || { tail -20 "$out/ggml.install.log"; exit 1; }
# llama.cpp's own code on that ggml: Windows 10 APIs (its vendored cpp-httplib refuses older ones);
# the tree's identity as scripts/build_llama.sh gives it
read -r number commit how < <(bash "$here/../source_identity.sh" "$src")
identity=()
if [ "$how" = sdist ] || [ "$how" = none ]; then
  export GIT_CEILING_DIRECTORIES=$(dirname "$src")
  identity=(-DLLAMA_BUILD_NUMBER="$number" -DLLAMA_BUILD_COMMIT="$commit")
fi
cmake -S "$src" -B "$out/llama" "${toolchain[@]}" "${identity[@]}" -DLLAMA_USE_SYSTEM_GGML=ON \
  -Dggml_DIR="$out/ggml-install/lib/cmake/ggml" -DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0A00 \
  -DCMAKE_CXX_FLAGS=-D_WIN32_WINNT=0x0A00 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
  > "$out/llama.configure.log" 2>&1 || { tail -30 "$out/llama.configure.log"; exit 1; }
cmake --build "$out/llama" -j "${JOBS:-2}" --target llama-completion > "$out/llama.build.log" 2>&1 \
  || { tail -40 "$out/llama.build.log"; exit 1; }
mkdir -p "$out/bin"
cp -f "$out"/ggml-install/bin/*.dll "$out"/llama/bin/*.dll "$out/llama/bin/llama-completion.exe" "$out/bin/"
for dll in libstdc++-6.dll libgcc_s_seh-1.dll libwinpthread-1.dll; do
  cp -f "$(x86_64-w64-mingw32-g++-posix -print-file-name=$dll)" "$out/bin/"
done
ls "$out/bin"
