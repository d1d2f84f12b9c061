#!/usr/bin/env bash
# The reduced pipeline-parallel race (docs/reduce.md) on a real GPU with NVIDIA's Vulkan driver: the
# standalone repro.cpp that `ggml-trace reduce tests/data/vulkan-nvidia-b11434-pp-h200.ggmltrace` wrote
# (committed in bench/gpu/reduce-pp/, so that nothing here needs Python), compiled against b10531's and
# b11434's Vulkan ggml and run RUNS times a set, unpatched and with our fix (patches/pipeline-host-reads.patch,
# which changes libggml-base alone). One call, from the repository root on the GPU host, the Vulkan loader
# and libglvnd unpacked from .gl first:
#   bench/gpu/reduce_red_h200.sh OUT_DIR
# Reads .h200/llama-10531-slim.tar.xz and .h200/llama-11434-slim.tar.xz (the sdists' llama.cpp trees) and
# .h200/vk.tar.xz (glslc, libshaderc, Vulkan and SPIR-V headers); both trees build at once, ggml's libraries
# only, half the cores each. Writes OUT_DIR/reduce-red.log (everything) and OUT_DIR/results.txt (a line a set).
# RUNS (default 20) runs a set; SETS (default 2) sets of each, the second only while time is left (DEADLINE_S,
# default 420, from the start). WORK: where the trees are built (default /tmp/reduce-red).
# LOCAL=1: no build; b10531's Vulkan build under build/ (lavapipe here: GGML_VK_VISIBLE_DEVICES=0) and the fix
# from LOCAL_PPFIX (default build/llama-b10531-vulkan-ppfix/bin): a dry run of everything after the build.
# BUILD_ONLY=base: configure both trees and build libggml-base alone, unpatched and fixed: a check of the build steps.
set -uo pipefail
out=$(realpath -m "${1:?usage: $0 OUT_DIR}")
mkdir -p "$out"
exec > >(tee -a "$out/reduce-red.log") 2>&1
root=$PWD
repro=$root/bench/gpu/reduce-pp/repro.cpp
runs=${RUNS:-20}; sets=${SETS:-2}; deadline=${DEADLINE_S:-420}
w=${WORK:-/tmp/reduce-red}
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
[ -f "$repro" ] || { echo "no $repro"; exit 1; }
mkdir -p "$w"

# build VER JOBS: VER's ggml (CPU + Vulkan) in $w/VER/b/bin, its libggml-base unpatched in $w/VER/orig and
# with the fix in $w/VER/ppfix, and the repro compiled against its headers ($w/VER/repro)
build() {
  local v=$1 jobs=$2 d=$w/$1
  local src=$d/llama.cpp b=$d/b
  rm -rf "$d" && mkdir -p "$d" && tar xJf "$root/.h200/llama-$v-slim.tar.xz" -C "$d" || return 1
  local vulkan
  vulkan=$(ls /usr/lib/x86_64-linux-gnu/libvulkan.so.1 2>/dev/null || ls /usr/lib*/libvulkan.so.1 | head -1)
  cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_VULKAN=ON -DGGML_RPC=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_NUMBER="$v" -DLLAMA_BUILD_COMMIT=sdist \
    -DVulkan_INCLUDE_DIR="$w/vk/include" -DVulkan_LIBRARY="$vulkan" -DVulkan_GLSLC_EXECUTABLE="$w/vk/bin/glslc" \
    -DSPIRV-Headers_DIR="$w/vk/share/cmake/SPIRV-Headers" \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$b/bin" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$b/bin" > "$d/cfg.log" 2>&1 \
    || { echo "b$v: configure failed"; tail -30 "$d/cfg.log"; return 1; }
  local target=ggml
  [ "${BUILD_ONLY:-}" = base ] && target=ggml-base
  cmake --build "$b" -j "$jobs" --target $target > "$d/build.log" 2>&1 \
    || { echo "b$v: build failed"; tail -40 "$d/build.log"; return 1; }
  mkdir -p "$d/orig" "$d/ppfix" && cp -a "$b"/bin/libggml-base.so* "$d/orig/"
  (cd "$src" && patch -p1 -s < "$root/patches/pipeline-host-reads.patch") || { echo "b$v: the fix does not apply"; return 1; }
  cmake --build "$b" -j "$jobs" --target ggml-base >> "$d/build.log" 2>&1 \
    || { echo "b$v: fixed ggml-base failed"; tail -20 "$d/build.log"; return 1; }
  cp -a "$b"/bin/libggml-base.so* "$d/ppfix/"
  echo "b$v: ggml built (unpatched and fixed libggml-base) at $(elapsed) s"
}

# compile VER SRC BIN: the repro against SRC's headers and BIN's libraries (BIN stays its run path)
compile() {
  c++ -std=c++17 -O2 "$repro" -I "$2/ggml/include" -L "$3" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$3" \
    -o "$w/$1/repro" || { echo "b$1: repro.cpp does not compile"; return 1; }
}

# run_set VER VARIANT LIBDIR BINDIR SET: RUNS runs of the repro with LIBDIR's libggml-base first
run_set() {
  local v=$1 var=$2 lib=$3 bin=$4 set=$5 d=$w/$1
  local env=(env LD_LIBRARY_PATH="$lib:$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  [ "$set" = 1 ] && echo "b$v $var loads $("${env[@]}" ldd "$d/repro" | grep -o 'libggml-base.so.0 => [^ ]*')"
  "${env[@]}" timeout 240 "$d/repro" "$runs" > "$d/$var.out" 2> "$d/$var.err"
  local rc=$?
  [ "$set" = 1 ] && grep -m3 "ggml_vulkan: 0 =\|device work" "$d/$var.err"
  local line="b$v $var set $set: $(head -1 "$d/$var.out") (exit $rc; $(grep -m1 -o 'device work: .*' "$d/$var.err"))"
  echo "$line" >> "$out/results.txt"
  echo "$line"
}

echo "reduce_red_h200: $(date -u +%FT%TZ) on $(hostname); repro $(md5sum < "$repro" | cut -c1-12)"
if [ -n "${LOCAL:-}" ]; then
  export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}  # lavapipe is listed only when asked for
  mkdir -p "$w/10531"
  src=$root/build/src/llama-b10531/llama.cpp; bin=$root/build/llama-b10531-vulkan/bin
  ppfix=$(realpath -m "${LOCAL_PPFIX:-$root/build/llama-b10531-vulkan-ppfix/bin}")
  compile 10531 "$src" "$bin" || exit 1
  for set in $(seq "$sets"); do
    run_set 10531 orig "$bin" "$bin" "$set"
    run_set 10531 ppfix "$ppfix" "$bin" "$set"
  done
  echo "done in $(elapsed) s"
  exit 0
fi

export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
rm -rf "$w/vk" && tar xJf "$root/.h200/vk.tar.xz" -C "$w" || exit 1
export LD_LIBRARY_PATH=$w/vk/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # glslc's libshaderc
jobs=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
build 10531 "$jobs" & p1=$!
build 11434 "$jobs" & p2=$!
ok=()
wait $p1 && ok+=(10531)
wait $p2 && ok+=(11434)
[ "${BUILD_ONLY:-}" = base ] && { echo "built (libggml-base only): ${ok[*]:-none} in $(elapsed) s"; exit 0; }
built=()
for v in "${ok[@]}"; do
  compile "$v" "$w/$v/llama.cpp" "$w/$v/b/bin" && built+=("$v")
done
for set in $(seq "$sets"); do
  if [ "$set" -gt 1 ] && [ "$(elapsed)" -gt "$deadline" ]; then
    echo "set $set left out: $(elapsed) s gone (DEADLINE_S=$deadline)"
    break
  fi
  for v in "${built[@]}"; do
    run_set "$v" orig "$w/$v/orig" "$w/$v/b/bin" "$set"
    run_set "$v" ppfix "$w/$v/ppfix" "$w/$v/b/bin" "$set"
  done
done
echo "done in $(elapsed) s"
