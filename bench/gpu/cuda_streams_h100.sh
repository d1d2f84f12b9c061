#!/usr/bin/env bash
# Inside a CUDA split, on one GPU (docs/cuda-streams.md): b11434 with CUDA, a random 8-layer x 1024 llama,
# greedy decoding, on one CUDA device and on two virtual devices of the same GPU (GGML_CUDA_DEVICES=2),
# with and without GGML_CUDA_GRAPH_OPT=1, unpatched and with patches/graph-opt-fork-lifetime.patch.
#
# From the repository root on the GPU host:
#   bench/gpu/cuda_streams_h100.sh CARRY OUT [STEP...]
# CARRY holds llama-11434-slim.tar.xz (the sdist's llama.cpp tree without models, docs and the backends
# this build does not use). Steps (default: all, in this order):
#   build    ggml + llama-completion + llama-bench with CUDA (sm_90), the hooks (CUPTI found there), the
#            model, and libggml-cuda with the patch beside the unpatched one
#   outputs  the outputs of every configuration against the one-device reference (RED/GREEN counts)
#   traces   the same configurations recorded with --cuda-streams, judged by `ggml-trace streams`
#   bench    llama-bench tg128 on one device: the cost of --cuda-streams itself (interleaved reps)
#   cost     llama-bench tg128: the patch's cost, GRAPH_OPT on one and two devices (interleaved reps)
# Every step keeps what it made in /tmp/cs, so a second run goes on where the first stopped; it takes
# longer than one device call: bench/gpu/in_background.sh runs it across calls. The results (log, outputs,
# the traces) are packed into OUT/cs-results.tar.xz.
set -uo pipefail
carry=$(realpath "${1:?usage: $0 CARRY OUT [STEP...]}"); out=$(realpath -m "${2:?usage: $0 CARRY OUT}"); shift 2
steps=${*:-build outputs traces bench cost}
W=/tmp/cs; R=$W/results; B=$W/build; S=$W/src/llama.cpp; BIN=$B/bin  # llama.cpp puts what it builds in bin/
mkdir -p "$out" $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/log.txt; }
export GGML_TRACE_SITE=$W/site
. bench/gpu/install_here.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$S/gguf-py
gt() { python3 -m ggml_trace.tracer.cli "$@"; }

# -- build ---------------------------------------------------------------------------------------------
build() {
  [ -x $BIN/llama-bench ] && [ -f $W/fix/libggml-cuda.so ] && [ -f $W/mid.gguf ] && return 0
  mkdir -p $W/src && tar xJf "$carry/llama-11434-slim.tar.xz" -C $W/src || return 1
  cmake -S $S -B $B -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_RPC=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_NUMBER=11434 -DLLAMA_BUILD_COMMIT=sdist > $W/cfg.log 2>&1 \
    || { tail -30 $W/cfg.log | tee -a $R/log.txt; return 1; }
  (python3 scripts/make_tiny_model.py $W/mid.gguf --layers 8 --embd 1024 --heads 16 --ff 2816 > $W/model.log 2>&1) &
  cmake --build $B -j "$(nproc)" --target llama-completion llama-bench > $W/build.log 2>&1 \
    || { grep -m5 -B2 -A5 "error" $W/build.log | tee -a $R/log.txt; return 1; }
  log "b11434 with CUDA built"
  JOBS=$(nproc) scripts/build_hooks.sh $S $BIN b11434-cuda > $W/hooks.log 2>&1 || { grep -B3 -A8 -m3 "error" $W/hooks.log | tee -a $R/log.txt; return 1; }
  grep -h "CUPTI mode" build/hooks-b11434-cuda.configure.log | tee -a $R/log.txt
  # the patched libggml-cuda beside the unpatched one: LD_LIBRARY_PATH picks one (RUNPATH gives way to it)
  mkdir -p $W/orig $W/fix && cp -a $BIN/libggml-cuda.so* $W/orig/
  cp $S/ggml/src/ggml-cuda/ggml-cuda.cu $W/ggml-cuda.cu.orig
  (cd $S && patch -p1 -s < "$OLDPWD/patches/graph-opt-fork-lifetime.patch") || return 1
  cmake --build $B -j "$(nproc)" --target ggml-cuda >> $W/build.log 2>&1 || { tail -20 $W/build.log; return 1; }
  cp -a $BIN/libggml-cuda.so* $W/fix/ && cp -a $W/orig/libggml-cuda.so* $BIN/
  cp $W/ggml-cuda.cu.orig $S/ggml/src/ggml-cuda/ggml-cuda.cu
  wait
  ls -la $W/mid.gguf >> $R/log.txt || { cat $W/model.log; return 1; }
  log "patched libggml-cuda built"
}

# -- helpers -------------------------------------------------------------------------------------------
words() { python3 -c "import random, sys; w = 'the of and to a in is it you that he was for on are with as I his they be at one have this from'.split(); r = random.Random(1); print(' '.join(r.choice(w) for _ in range(int(sys.argv[1]))))" "$1"; }
gen=(--temp 0 --seed 1 --top-k 1 -no-cnv -ngl 99)
# comp VARIANT ARGS...: llama-completion on the variant's libggml-cuda (orig or fix)
comp() { local v=$1; shift; LD_LIBRARY_PATH=$W/$v timeout 120 stdbuf -o0 $BIN/llama-completion -m $W/mid.gguf "$@"; }
# cell NAME VARIANT RUNS ARGS...: RUNS outputs, counted against the reference (the environment is the caller's)
cell() {
  local name=$1 v=$2 n=$3 i right=0; shift 3
  for ((i = 1; i <= n; i++)); do
    comp $v "$@" > $R/out-$name-$i.txt 2> $W/out-$name-$i.log
    cmp -s $R/out-$name-$i.txt $R/ref.txt && right=$((right + 1))
  done
  local distinct; distinct=$(md5sum $R/out-$name-*.txt | cut -d' ' -f1 | sort -u | wc -l)
  log "$name ($v): right $right of $n, $distinct distinct output(s)"
}

# -- outputs -------------------------------------------------------------------------------------------
outputs() {
  local p; p=$(words 45)
  comp orig -p "$p" -n 48 "${gen[@]}" -dev CUDA0 > $R/ref.txt 2> $R/ref.log
  log "reference: one CUDA device, no GRAPH_OPT, $(wc -c < $R/ref.txt) bytes"
  local two=(-p "$p" -n 48 "${gen[@]}" -dev CUDA0,CUDA1) one=(-p "$p" -n 48 "${gen[@]}" -dev CUDA0)
  GGML_CUDA_GRAPH_OPT=1 cell 1dev-gopt orig 4 "${one[@]}"
  GGML_CUDA_GRAPH_OPT=1 cell 1dev-gopt-fix fix 4 "${one[@]}"
  GGML_CUDA_DEVICES=2 cell 2dev orig 4 "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 cell 2dev-gopt orig 20 "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 cell 2dev-gopt-fix fix 20 "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 CUDA_LAUNCH_BLOCKING=1 cell 2dev-gopt-blocking orig 3 "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 CUDA_LAUNCH_BLOCKING=1 cell 2dev-gopt-fix-blocking fix 3 "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 GGML_CUDA_DISABLE_GRAPHS=1 cell 2dev-gopt-nographs orig 3 "${two[@]}"
}

# -- traces --------------------------------------------------------------------------------------------
# rec NAME VARIANT ARGS...: llama-completion recorded in CUDA streams mode, then judged where it ran
rec() {
  local name=$1 v=$2; shift 2
  LD_LIBRARY_PATH=$W/$v gt record --no-nvml --hooks $BIN/libggml-trace-hooks.so --cuda-streams \
    -o $R/$name.ggmltrace -- timeout 120 stdbuf -o0 $BIN/llama-completion -m $W/mid.gguf "$@" \
    > $R/trace-$name.txt 2> $W/trace-$name.log
  log "$name: rc=$?, output $(cmp -s $R/trace-$name.txt $R/ref16.txt && echo right || echo WRONG), $(stat -c %s $R/$name.ggmltrace 2>/dev/null || echo no) bytes of trace"
  grep -h "ggml-trace" $W/trace-$name.log | head -5 | tee -a $R/log.txt
  gt streams $R/$name.ggmltrace > $R/streams-$name.txt 2>&1
  log "streams $name: exit $?: $(head -1 $R/streams-$name.txt | cut -c1-400)"
}
traces() {
  # small enough to commit (tests/data): a 10-word prompt and 8 tokens; the order inside a split does
  # not depend on how long the program runs
  local p; p=$(words 10)
  comp orig -p "$p" -n 8 "${gen[@]}" -dev CUDA0 > $R/ref16.txt 2> /dev/null
  local two=(-p "$p" -n 8 "${gen[@]}" -dev CUDA0,CUDA1) one=(-p "$p" -n 8 "${gen[@]}" -dev CUDA0)
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 rec 2dev-gopt orig "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 rec 2dev-gopt-fix fix "${two[@]}"
  GGML_CUDA_GRAPH_OPT=1 rec 1dev-gopt orig "${one[@]}"
  GGML_CUDA_DEVICES=2 rec 2dev orig "${two[@]}"
  GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 GGML_CUDA_DISABLE_GRAPHS=1 rec 2dev-gopt-nographs orig "${two[@]}"
}

# -- bench ---------------------------------------------------------------------------------------------
# tg VARIANT LABEL [record] ARGS...: llama-bench tg128, its t/s into the log
tg() {
  local v=$1 label=$2; shift 2
  local pre=()
  if [ "${1:-}" = record ]; then shift; pre=(gt record --no-nvml --hooks $BIN/libggml-trace-hooks.so --cuda-streams -o $W/bench.ggmltrace --); fi
  local line
  line=$(LD_LIBRARY_PATH=$W/$v "${pre[@]}" timeout 120 $BIN/llama-bench -m $W/mid.gguf -ngl 99 -p 0 -n 128 -r 3 -o csv "$@" 2>/dev/null | tail -1)
  log "tg128 $label: $(echo "$line" | python3 -c "import csv, sys; r = next(csv.reader(sys.stdin)); print(r[-2], '+-', r[-1], 't/s (avg_ts, stddev_ts)')" 2>&1)"
}
bench() {
  local rep
  for rep in 1 2 3; do
    tg orig "1dev untraced (rep $rep)" -dev CUDA0
    tg orig "1dev traced --cuda-streams (rep $rep)" record -dev CUDA0
  done
}
# the patch's cost (the figures in docs/cuda-streams.md): interleaved reps, unpatched and patched
cost() {
  local rep
  for rep in 1 2 3; do
    GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 tg orig "2dev-gopt unpatched (rep $rep)" -dev CUDA0/CUDA1
    GGML_CUDA_DEVICES=2 GGML_CUDA_GRAPH_OPT=1 tg fix "2dev-gopt patched (rep $rep)" -dev CUDA0/CUDA1
    GGML_CUDA_GRAPH_OPT=1 tg orig "1dev-gopt unpatched (rep $rep)" -dev CUDA0
    GGML_CUDA_GRAPH_OPT=1 tg fix "1dev-gopt patched (rep $rep)" -dev CUDA0
  done
}

for s in $steps; do
  [ -f $W/.done-$s ] && { log "$s: done earlier"; continue; }
  log "step $s"
  if $s; then touch $W/.done-$s; else log "$s FAILED"; break; fi
done
tar cJf "$out/cs-results.tar.xz" -C $W results
log "packed $(stat -c %s "$out/cs-results.tar.xz") bytes"
