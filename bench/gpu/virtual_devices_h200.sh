#!/usr/bin/env bash
# Multi-device claims on the real drivers of ONE GPU: CUDA virtual devices (GGML_CUDA_DEVICES=N, each
# with its own streams) and Vulkan devices of one GPU (GGML_VK_VISIBLE_DEVICES=0,0: two VkDevices).
# b11434 is built once with CUDA (sm_90), Vulkan and RPC in one ggml, with two patched libggml-base
# beside it: tpfix (patches/meta-allreduce-scratch.patch) and ppfix (patches/pipeline-host-reads.patch).
#
# From the repository root on the GPU host, the Vulkan loader and libglvnd unpacked (.gl, device README):
#   bench/gpu/virtual_devices_h200.sh CARRY OUT [STEP...]
# CARRY holds llama-11434-slim.tar.xz and vk.tar.xz (glslc, libshaderc, Vulkan and SPIR-V headers).
# Steps (default: all, in this order): build tensor force layer envelope protocol.
# The build and every finished step stay in /tmp/vd, so a second run goes on where the first stopped.
# It takes longer than one device call: bench/gpu/in_background.sh runs it across calls. At the end
# everything gathered (log, outputs, traces) is packed into OUT/vd-results.tar.xz; the analysis of
# the traces (races, stalls, summary) is done afterwards, on any machine.
set -uo pipefail
carry=$(realpath "${1:?usage: $0 CARRY OUT [STEP...]}"); out=$(realpath -m "${2:?usage: $0 CARRY OUT}"); shift 2
steps=${*:-build tensor force layer envelope protocol}
W=/tmp/vd; R=$W/results; B=$W/build; S=$W/src/llama.cpp; BIN=$W/build/bin
mkdir -p "$out" $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/log.txt; }
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}

# -- the project's Python, installed (not imported from the checkout) -------------------------------
if [ ! -d $W/site/ggml_trace ]; then
  python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target $W/site . > $W/pip.log 2>&1 \
    || log "pip install of the project failed: $(tail -2 $W/pip.log); using the checkout"
fi
export PYTHONPATH=$W/site:$PWD:$S/gguf-py
gt() { python3 -m ggml_trace.tracer.cli "$@"; }

# -- build ---------------------------------------------------------------------------------------------
build() {
  mkdir -p $W/src && tar xJf "$carry/llama-11434-slim.tar.xz" -C $W/src && tar xJf "$carry/vk.tar.xz" -C $W || return 1
  export LD_LIBRARY_PATH=$W/vk/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # glslc's libshaderc
  # NCCL as the pip package ships it (no libnccl.so link): a prefix CMake's FindNCCL can search
  local nccl_lib nccl_h nccl=()
  nccl_lib=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
  nccl_h=$(find / -name 'nccl.h' -not -path '/proc/*' 2>/dev/null | head -1)
  if [ -n "$nccl_lib" ] && [ -n "$nccl_h" ]; then
    mkdir -p $W/nccl/lib && ln -sf "$(dirname "$nccl_h")" $W/nccl/include && ln -sf "$nccl_lib" $W/nccl/lib/libnccl.so
    ln -sf "$nccl_lib" $W/nccl/lib/libnccl.so.2; nccl=(-DNCCL_ROOT=$W/nccl); log "NCCL: $nccl_lib"
  fi
  local vulkan; vulkan=$(ls /usr/lib/x86_64-linux-gnu/libvulkan.so.1 2>/dev/null || ls /usr/lib*/libvulkan.so.1 | head -1)
  cmake -S $S -B $B -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON -DGGML_VULKAN=ON \
    -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES=90-real "${nccl[@]}" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_NUMBER=11434 -DLLAMA_BUILD_COMMIT=sdist \
    -DVulkan_INCLUDE_DIR=$W/vk/include -DVulkan_LIBRARY="$vulkan" -DVulkan_GLSLC_EXECUTABLE=$W/vk/bin/glslc \
    -DSPIRV-Headers_DIR=$W/vk/share/cmake/SPIRV-Headers \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=$BIN -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$BIN > $W/cfg.log 2>&1 \
    || { tail -30 $W/cfg.log | tee -a $R/log.txt; return 1; }
  grep -E "NCCL|Including" $W/cfg.log | tee -a $R/log.txt
  # the models meanwhile (CPU only): a 1.6 GB 8x2048 llama and a 0.4 GB 8x1024 one
  (python3 scripts/make_tiny_model.py $W/big.gguf --layers 8 --embd 2048 --heads 16 --ff 5632 > $W/model.log 2>&1
   python3 scripts/make_tiny_model.py $W/mid.gguf --layers 8 --embd 1024 --heads 16 --ff 2816 >> $W/model.log 2>&1) &
  cmake --build $B -j "$(nproc)" --target llama-completion ggml-rpc-server > $W/build.log 2>&1 \
    || { grep -m5 -B2 -A5 "error" $W/build.log | tee -a $R/log.txt; return 1; }
  log "ggml (CUDA + Vulkan + RPC) and llama-completion built"
  scripts/build_hooks.sh $S $BIN b11434-cudavk > $W/hooks.log 2>&1 || { tail -20 $W/hooks.log | tee -a $R/log.txt; return 1; }
  grep -h "CUPTI mode" build/hooks-b11434-cudavk.configure.log | tee -a $R/log.txt
  # each variant: its own libggml-base (the patches touch libggml-base alone) beside the same hooks
  cp $S/ggml/src/ggml-backend.cpp $W/ggml-backend.cpp.orig
  cp $S/ggml/src/ggml-backend-meta.cpp $W/ggml-backend-meta.cpp.orig
  local v name patch
  for v in tpfix:meta-allreduce-scratch ppfix:pipeline-host-reads orig:; do
    name=${v%%:*}; patch=${v#*:}
    cp $W/ggml-backend.cpp.orig $S/ggml/src/ggml-backend.cpp
    cp $W/ggml-backend-meta.cpp.orig $S/ggml/src/ggml-backend-meta.cpp
    if [ -n "$patch" ]; then (cd $S && patch -p1 -s < "$OLDPWD/patches/$patch.patch") || return 1; fi
    cmake --build $B -j "$(nproc)" --target ggml-base >> $W/build.log 2>&1 || { tail -20 $W/build.log; return 1; }
    mkdir -p $W/$name && cp -a $BIN/libggml-base.so* $BIN/libggml-trace-*.so $W/$name/
  done
  wait  # the models
  ls -la $W/big.gguf $W/mid.gguf >> $R/log.txt || { cat $W/model.log; return 1; }
  log "variants tpfix, ppfix, orig built"
}

# -- helpers -------------------------------------------------------------------------------------------
words() { python3 -c "import random, sys; w = 'the of and to a in is it you that he was for on are with as I his they be at one have this from'.split(); r = random.Random(1); print(' '.join(r.choice(w) for _ in range(int(sys.argv[1]))))" "$1"; }
gen=(--temp 0 --seed 1 --top-k 1 -no-cnv -ngl 99)
# comp VARIANT ARGS... : llama-completion of b11434 on the variant's libggml-base (stdout unbuffered)
comp() { local v=$1; shift; LD_LIBRARY_PATH=$W/$v:$BIN timeout 300 stdbuf -o0 $BIN/llama-completion "$@"; }
# rec VARIANT NAME ARGS... : the same, traced with device timing, into $R/NAME.{ggmltrace,txt,log}
rec() {
  local v=$1 name=$2; shift 2
  LD_LIBRARY_PATH=$W/$v:$BIN gt record --no-nvml --hooks $W/$v/libggml-trace-hooks.so --device-timing \
    -o $R/$name.ggmltrace -- timeout 300 stdbuf -o0 $BIN/llama-completion "$@" > $R/$name.txt 2> $R/$name.log
  local rc=$?
  log "$name: rc=$rc, output $(same $R/$name.txt) ($(stat -c %s $R/$name.ggmltrace 2>/dev/null || echo no) bytes of trace)"
}
# cuda_devs N: CUDA0,...,CUDA{N-1}. This ggml has Vulkan devices of the same GPU too: every run names its devices.
cuda_devs() { local i d=CUDA0; for ((i = 1; i < $1; i++)); do d+=",CUDA$i"; done; echo $d; }
# same FILE: compared with the reference output of this step ($ref)
same() { cmp -s "$1" "$ref" && echo "= reference" || echo "DIFFERS from reference"; }

# -- tensor parallelism on CUDA virtual devices ----------------------------------------------------------
tensor() {
  local m=$W/mid.gguf p="the of and to a in is it you that"
  ref=$R/tp-ref-1dev.txt
  comp orig -m $m -p "$p" -n 16 "${gen[@]}" -dev CUDA0 > $ref 2> $R/tp-ref-1dev.log
  log "reference: one CUDA device, $(wc -c < $ref) bytes"
  for n in 2 4; do
    export GGML_CUDA_DEVICES=$n
    local devs; devs=$(cuda_devs $n)
    GGML_CUDA_ALLREDUCE=none rec orig tp$n-butterfly -m $m -p "$p" -n 16 "${gen[@]}" -sm tensor -dev $devs
    GGML_CUDA_ALLREDUCE=none rec tpfix tp$n-butterfly-tpfix -m $m -p "$p" -n 16 "${gen[@]}" -sm tensor -dev $devs
    rec orig tp$n-default -m $m -p "$p" -n 16 "${gen[@]}" -sm tensor -dev $devs
    grep -h "NCCL\|AllReduce\|virtual device" $R/tp$n-default.log | sort | uniq -c | head -5 | tee -a $R/log.txt
  done
  unset GGML_CUDA_DEVICES
}

# -- the butterfly race forced on real CUDA streams: unpatched RED, the fix under the same delay GREEN ---
force_step() {
  local m=$W/mid.gguf p="the of and to a in is it you that"
  ref=$R/tp-ref-1dev.txt
  export GGML_CUDA_DEVICES=2 GGML_CUDA_ALLREDUCE=none
  LD_LIBRARY_PATH=$W/orig:$BIN gt force $R/tp2-butterfly.ggmltrace --every-graph --runs 5 --baseline-runs 2 \
    --expect-output $ref --hooks $W/orig/libggml-trace-hooks.so --out $W/force --json > $R/force.json 2> $R/force.err
  log "force exit $?: $(python3 -c "import json; d=json.load(open('$R/force.json')); print({k: d.get(k) for k in ('verdict','runs','manifested_runs','diverged_runs','baseline_runs','baseline_diverged_from_expected','delay_us','rule')})" 2>&1 | tail -1)"
  local rule; rule=$(python3 -c "import json; print(json.load(open('$R/force.json'))['rule'])" 2>/dev/null)
  if [ -n "$rule" ]; then
    for i in 1 2 3 4 5; do
      LD_LIBRARY_PATH=$W/tpfix:$BIN gt record --no-nvml --hooks $W/tpfix/libggml-trace-hooks.so --device-timing \
        --delay "$rule" -o $W/forced-tpfix-$i.ggmltrace -- timeout 300 stdbuf -o0 $BIN/llama-completion \
        -m $m -p "$p" -n 16 "${gen[@]}" -sm tensor -dev CUDA0,CUDA1 > $R/forced-tpfix-$i.txt 2> $W/forced-tpfix-$i.log
      log "tpfix under '$rule' run $i: output $(same $R/forced-tpfix-$i.txt)"
    done
    cp $W/forced-tpfix-1.ggmltrace $R/tp2-butterfly-tpfix-forced.ggmltrace
  fi
  unset GGML_CUDA_DEVICES GGML_CUDA_ALLREDUCE
}

# -- pipeline parallelism (-sm layer) on several devices of one GPU --------------------------------------
short=""; long=""
prompts() { [ -n "$long" ] || { short=$(words 230); long=$(words 400); }; }
layer() {
  prompts
  local m=$W/big.gguf
  ref=$R/pp-ref-vulkan0.txt
  comp orig -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -dev Vulkan0 > $ref 2> $R/pp-ref-vulkan0.log
  comp orig -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -dev CUDA0 > $R/pp-ref-cuda0.txt 2> /dev/null
  log "references: Vulkan0 alone $(wc -c < $ref) bytes; CUDA0 alone $(cmp -s $ref $R/pp-ref-cuda0.txt && echo same || echo differs)"
  ref=$R/pp-ref-cuda0.txt
  for n in 2 4; do
    GGML_CUDA_DEVICES=$n rec orig layer-cuda$n -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev "$(cuda_devs $n)"
  done
  ref=$R/pp-ref-vulkan0.txt
  GGML_VK_VISIBLE_DEVICES=0,0 rec orig layer-vk00 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,Vulkan1
  GGML_VK_VISIBLE_DEVICES=0,0 rec orig layer-vk00-2 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,Vulkan1
  GGML_VK_VISIBLE_DEVICES=0,0 rec ppfix layer-vk00-ppfix -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,Vulkan1
  GGML_VK_VISIBLE_DEVICES=0,0,0 rec orig layer-vk000 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,Vulkan1,Vulkan2
}

# -- the pipeline race's envelope: which second device leaves Vulkan0's host reads unordered ------------
envelope() {
  prompts
  local m=$W/big.gguf port=50123
  ref=$R/pp-ref-vulkan0.txt
  # Vulkan0 beside an empty virtual device (the known red case)
  for v in orig ppfix; do
    LD_LIBRARY_PATH=$W/$v:$BIN gt record --no-nvml --hooks $W/$v/libggml-trace-hooks.so --device-timing --virtual-devices 1 \
      -o $R/env-vk-vdev-$v.ggmltrace -- timeout 300 stdbuf -o0 $BIN/llama-completion -m $m -p "$long" -n 16 "${gen[@]}" \
      -b 2048 -ub 512 -sm layer -dev Vulkan0,VDEV0 -ts 1,0 > $R/env-vk-vdev-$v.txt 2> $R/env-vk-vdev-$v.log
    log "env-vk-vdev-$v: output $(same $R/env-vk-vdev-$v.txt)"
  done
  # Vulkan0 and CUDA0 of one ggml: CUDA declines host and Vulkan sources (a synchronous copy)
  rec orig env-vk-cuda-ts10 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,CUDA0 -ts 1,0
  rec orig env-vk-cuda-ts11 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer -dev Vulkan0,CUDA0 -ts 1,1
  # Vulkan0 and an RPC server on localhost (a CPU backend behind a socket; RPC has no async copy)
  LD_LIBRARY_PATH=$W/orig:$BIN $BIN/ggml-rpc-server -H 127.0.0.1 -p $port -d CPU > $W/rpc.log 2>&1 &
  local rpc=$!; sleep 2
  rec orig env-vk-rpc-ts10 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer --rpc 127.0.0.1:$port -dev Vulkan0,RPC0 -ts 1,0
  rec orig env-vk-rpc-ts31 -m $m -p "$long" -n 16 "${gen[@]}" -b 2048 -ub 512 -sm layer --rpc 127.0.0.1:$port -dev Vulkan0,RPC0 -ts 3,1
  kill $rpc 2>/dev/null; head -5 $W/rpc.log >> $R/log.txt
}

# -- upstream #26344's protocol: 100 untraced runs, --top-k 1, count identical outputs -------------------
protocol() {
  local m=$W/mid.gguf p="I believe the meaning of life is" v i
  export GGML_CUDA_DEVICES=2
  for v in orig tpfix; do
    for ar in none default; do
      mkdir -p $W/proto-$v-$ar
      for i in $(seq -w 1 100); do
        if [ $ar = none ]; then export GGML_CUDA_ALLREDUCE=none; else unset GGML_CUDA_ALLREDUCE; fi
        comp $v -m $m -p "$p" -n 32 "${gen[@]}" -sm tensor -dev CUDA0,CUDA1 > $W/proto-$v-$ar/$i.txt 2>/dev/null &
        # four processes at a time on the one GPU
        (( 10#$i % 4 == 0 )) && wait
      done
      wait
      (cd $W/proto-$v-$ar && md5sum *.txt | awk '{print $1}' | sort | uniq -c | sort -rn) > $R/protocol-$v-$ar.txt
      log "protocol $v allreduce=$ar: $(awk '{printf "%s ", $1}' $R/protocol-$v-$ar.txt) (runs per distinct output)"
    done
  done
  unset GGML_CUDA_DEVICES GGML_CUDA_ALLREDUCE
}

# -- run the steps not done yet ------------------------------------------------------------------------
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee -a $R/log.txt
python3 -c "import ggml_trace, setuptools; print('ggml_trace from', ggml_trace.__file__)" 2>&1 | tee -a $R/log.txt
for step in $steps; do
  [ -f $W/$step.ok ] && continue
  log "== $step"
  fn=$step; [ $step = force ] && fn=force_step
  if $fn; then touch $W/$step.ok; log "== $step done"; else log "== $step FAILED"; [ $step = build ] && break; fi
done
# what came back: one archive (the device tool brings back at most 8 files) and the log
tar cJf "$out/vd-results.tar.xz" -C $W results 2>/dev/null
cp $R/log.txt "$out/log.txt"
ls -la "$out"
