#!/usr/bin/env bash
# The pipeline-parallel race (docs/pipeline-parallel.md) on a real GPU with NVIDIA's Vulkan driver:
# b11434's Vulkan build, unpatched, with our fix (patches/pipeline-host-reads.patch) and with the blunt
# one (patches/sync-every-split.patch). One call, from the repository root on the GPU host:
#   bench/gpu/pipeline_vulkan_h200.sh SLIM_TAR VK_TAR OUT_DIR
# SLIM_TAR: llama-11434-slim.tar.xz (the sdist's llama.cpp tree without models/docs/tests);
# VK_TAR: vk.tar.xz (vk/bin/glslc, vk/lib/libshaderc.so.1, vk/include: Vulkan and SPIR-V headers).
# The Vulkan loader and libglvnd must be unpacked already (.gl, device README). Pipeline parallelism
# needs two devices: Vulkan0 takes every layer and one empty virtual device sits beside it
# (-dev Vulkan0,VDEV0 -ts 1,0), so that llama.cpp turns it on ("sched copies = 4").
# RUNS (default 4) traced runs per build and prompt; REPS (default 3) untraced timing rounds; PROMPTS
# (default "short long"); SKIP_SPEED=1 leaves the timing rounds out.
set -uo pipefail
slim=$(realpath "$1"); vk=$(realpath "$2"); out=$3
runs=${RUNS:-4}; reps=${REPS:-3}
w=${WORK:-$PWD/.ppwork}  # the builds and the model; kept, so that a second call goes on from there
mkdir -p "$out" $w
out=$(realpath "$out")
exec > >(tee -a "$out/pipeline.log") 2>&1
. bench/gpu/install_here.sh || exit 1
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
t0=$(date +%s)
src=$w/src/llama.cpp; b=$w/build
if [ ! -x $w/orig/libggml-trace-hooks.so ]; then
  mkdir -p $w/src && tar xJf "$slim" -C $w/src && tar xJf "$vk" -C $w
  export LD_LIBRARY_PATH=$w/vk/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # glslc's libshaderc
  vulkan=$(ls /usr/lib/x86_64-linux-gnu/libvulkan.so.1 2>/dev/null || ls /usr/lib*/libvulkan.so.1 | head -1)
  cmake -S $src -B $b -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_VULKAN=ON -DGGML_RPC=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_NUMBER=11434 -DLLAMA_BUILD_COMMIT=sdist \
    -DVulkan_INCLUDE_DIR=$w/vk/include -DVulkan_LIBRARY="$vulkan" -DVulkan_GLSLC_EXECUTABLE=$w/vk/bin/glslc -DSPIRV-Headers_DIR=$w/vk/share/cmake/SPIRV-Headers \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=$b/bin -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$b/bin > $w/cfg.log 2>&1 \
    || { tail -30 $w/cfg.log; exit 1; }
  cmake --build $b -j "$(nproc)" --target llama-completion > $w/build.log 2>&1 || { tail -40 $w/build.log; exit 1; }
  scripts/build_hooks.sh $src $b/bin b11434-vulkan || exit 1
  echo "Vulkan build and hooks in $(( $(date +%s) - t0 )) s"
  # each variant: its own libggml-base (the patches touch ggml-backend.cpp alone) beside the same hooks
  cp $src/ggml/src/ggml-backend.cpp $w/ggml-backend.cpp.orig
  for v in ppfix:pipeline-host-reads ppsync:sync-every-split orig:; do
    name=${v%%:*}; patch=${v#*:}
    cp $w/ggml-backend.cpp.orig $src/ggml/src/ggml-backend.cpp
    if [ -n "$patch" ]; then
      (cd $src && patch -p1 -s < "$OLDPWD/patches/$patch.patch") || exit 1
    fi
    cmake --build $b -j "$(nproc)" --target ggml-base >> $w/build.log 2>&1 || { tail -20 $w/build.log; exit 1; }
    mkdir -p $w/$name && cp -a $b/bin/libggml-base.so* $b/bin/libggml-trace-*.so $w/$name/
  done
  echo "variants built in $(( $(date +%s) - t0 )) s"
fi
export PYTHONPATH=$src/gguf-py:$PYTHONPATH
model=$w/big.gguf
[ -f $model ] || python3 scripts/make_tiny_model.py $model --layers 8 --embd 2048 --heads 16 --ff 5632 || exit 1
# Words in a seeded random order: a periodic prompt can give consecutive ubatches the same token
# embeddings, and then an embedding read one ubatch late is the right one (no wrong output to see).
words() { python3 -c "import random, sys; w = 'the of and to a in is it you that he was for on are with as I his they be at one have this from'.split(); r = random.Random(1); print(' '.join(r.choice(w) for _ in range(int(sys.argv[1]))))" "$1"; }
short=$(words 230)    # ~1100 tokens (words outside the vocabulary's own are spelled in bytes)
long=$(words 400)     # ~1900 tokens: llama.cpp's default batches (-b 2048 -ub 512) pipeline it
gen=(--temp 0 --seed 1 -no-cnv -n 32 -ngl 99)
completion() {  # completion VARIANT PROMPT BATCHES... -> stdout; the variant's ggml first on the library path
  local v=$1 p=$2; shift 2
  LD_LIBRARY_PATH=$w/$v:$b/bin timeout 300 stdbuf -o0 $b/bin/llama-completion -m $model -p "$p" "${gen[@]}" "$@"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for prompt in ${PROMPTS:-short long}; do
  case $prompt in short) batches=(-b 1024 -ub 128); p=$short ;; long) batches=(-b 2048 -ub 512); p=$long ;; esac
  completion orig "$p" "${batches[@]}" -dev none > $out/$prompt-cpu.txt 2>$out/$prompt-cpu.log
  completion orig "$p" "${batches[@]}" -dev Vulkan0 > $out/$prompt-vulkan0.txt 2>$out/$prompt-vulkan0.log
  cmp -s $out/$prompt-cpu.txt $out/$prompt-vulkan0.txt && echo "$prompt: Vulkan0 alone = CPU-only" \
    || echo "$prompt: Vulkan0 alone DIFFERS from CPU-only"
  for v in orig ppfix; do
    for i in $(seq $runs); do
      t=$out/$prompt-$v-$i
      LD_LIBRARY_PATH=$w/$v:$b/bin python3 -m ggml_trace.tracer.cli record --hooks $w/$v/libggml-trace-hooks.so --device-timing --virtual-devices 1 \
        -o $t.ggmltrace \
        -- timeout 300 stdbuf -o0 $b/bin/llama-completion -m $model -p "$p" "${gen[@]}" "${batches[@]}" -sm layer \
        -dev Vulkan0,VDEV0 -ts 1,0 > $t.txt 2> $t.log
      # right = the output of Vulkan0 alone (no pipeline; the GPU's arithmetic can differ from the CPU's)
      same=$(cmp -s $t.txt $out/$prompt-vulkan0.txt && echo right || echo WRONG)
      python3 -m ggml_trace.tracer.cli races --json $t.ggmltrace > $t.races.json 2>/dev/null
      python3 - "$t" "$prompt $v run $i: output $same" <<'PY'
import json, sys
from ggml_trace import analysis
t = analysis.load(sys.argv[1] + ".ggmltrace")
# the scheduler's events exist only with pipeline parallelism (parallel=true, n_copies > 1)
waits = int((t.calls["kind"].astype(str) == "event_wait").sum())
races = json.load(open(sys.argv[1] + ".races.json"))["races"]
cross = [r for r in races if r["a"]["graph"] != r["b"]["graph"]]
print(sys.argv[2] + f"; {len(t.splits)} splits, {waits} event waits; {len(races)} races, cross-graph: " + (", ".join(
    f"{r['a']['tensor']}/{r['b']['tensor']} {r['verdict']} x{r['count']}" for r in cross) or "none"))
PY
    done
  done
done
# prefill speed, untraced: only the virtual device's library is preloaded (it must be: VDEV0 is a device)
vdev=$w/orig/libggml-trace-vdev.so
[ -n "${SKIP_SPEED:-}" ] && reps=0
for rep in $(seq $reps); do
  for v in orig ppfix ppsync; do
    LD_PRELOAD=$vdev GGML_TRACE_VIRTUAL_DEVICES=1 LD_LIBRARY_PATH=$w/$v:$b/bin timeout 300 $b/bin/llama-completion -m $model \
      -p "$long" "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,VDEV0 -ts 1,0 > $out/speed-$v-$rep.txt 2> $out/speed-$v-$rep.log
    tps=$(grep -o "prompt eval time = .*" $out/speed-$v-$rep.log | grep -o "[0-9.]* tokens per second" | head -1)
    same=$(cmp -s $out/speed-$v-$rep.txt $out/long-vulkan0.txt && echo right || echo WRONG)
    echo "speed $v rep $rep: prefill ${tps:-?} (output $same)"
  done
done
echo "done in $(( $(date +%s) - t0 )) s"
