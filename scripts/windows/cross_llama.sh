#!/usr/bin/env bash
# cross_llama.sh SRC OUT: llama-completion.exe of the llama.cpp tree SRC as llama.cpp's Windows
# releases lay it out, cross-built with MinGW-w64 into OUT/bin (docs/windows.md): ggml with
# GGML_BACKEND_DL on (the CPU backend a DLL that the program's ggml_backend_load_all() loads, and
# GGML_BACKEND_PATH's hooks with it), libllama, llama.cpp's common library and the program, with
# MinGW's runtime DLLs. The hooks go beside it separately (the Makefile copies cross_hooks.sh's).
set -euo pipefail
src=$(realpath "$1"); out=$(realpath -m "$2")
here=$(cd "$(dirname "$0")" && pwd)
# ggml as cross_ggml.sh builds it, but loading its backends (into OUT/bin, with MinGW's runtime);
# installed, for llama.cpp's CMake to find
bash "$here/cross_ggml.sh" "$src" "$out" -DGGML_BACKEND_DL=ON
cmake --install "$out/cmake" --prefix "$out/ggml-install" > "$out/ggml.install.log" 2>&1 || { tail -20 "$out/ggml.install.log"; exit 1; }
# llama.cpp's own code on that ggml: Windows 10 APIs (its vendored cpp-httplib refuses older ones);
# the tree's identity as scripts/build_llama.sh gives it
read -r number commit how < <(bash "$here/../source_identity.sh" "$src")
identity=()
if [ "$how" = sdist ] || [ "$how" = none ]; then
  export GIT_CEILING_DIRECTORIES=$(dirname "$src")
  identity=(-DLLAMA_BUILD_NUMBER="$number" -DLLAMA_BUILD_COMMIT="$commit")
fi
cmake -S "$src" -B "$out/llama" -DCMAKE_TOOLCHAIN_FILE="$here/mingw-w64.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON "${identity[@]}" -DLLAMA_USE_SYSTEM_GGML=ON \
  -Dggml_DIR="$out/ggml-install/lib/cmake/ggml" -DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0A00 \
  -DCMAKE_CXX_FLAGS=-D_WIN32_WINNT=0x0A00 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
  > "$out/llama.configure.log" 2>&1 || { tail -30 "$out/llama.configure.log"; exit 1; }
cmake --build "$out/llama" -j "${JOBS:-2}" --target llama-completion > "$out/llama.build.log" 2>&1 \
  || { tail -40 "$out/llama.build.log"; exit 1; }
cp -f "$out"/llama/bin/*.dll "$out/llama/bin/llama-completion.exe" "$out/bin/"
ls "$out/bin"
