#!/usr/bin/env bash
# GPU-host runs for device-side timing, CUPTI and NVML, in two steps (each fits one 10-minute call).
# Run from the repository root on a host with one or two NVIDIA GPUs, CUDA and CUPTI:
#   bench/gpu/h200_session.sh build    SLIM_TARS...            # CUDA (sm_90) builds + hooks, in parallel
#   bench/gpu/h200_session.sh capture  MODEL OUT_DIR           # traced runs, overhead table (tiny model)
#     (BUILDS="10531 11434" picks the builds to trace, NO_OVERHEAD=1 skips the table)
#   bench/gpu/h200_session.sh bigbench GGUF_WHEEL OUT_DIR      # overhead on a 1.6 GB random-weight model
#   bench/gpu/h200_session.sh overhead MODEL REPS [MODEL REPS...]  # llama-bench, the four modes interleaved
#     (MODES="plain cupti cupti-kernels" picks the modes; cupti: CUDA graphs as one record, the default)
# SLIM_TARS: llama.cpp source tarballs named llama-NNNNN-slim.tar.xz (the sdist's llama.cpp tree).
set -uo pipefail
step=$1; shift
. bench/gpu/install_here.sh || exit 1

build_one() {  # build_one TARBALL -> /tmp/bNNNNN/bin with CUDA ggml, llama programs and the hooks
  local tar=$1 b; b=$(basename "$tar" | sed -E 's/llama-([0-9]+)-slim.*/\1/')
  local src=/tmp/src$b bin=/tmp/b$b/bin
  [ -x $bin/libggml-trace-hooks.so ] && return 0
  mkdir -p $src && tar xJf "$tar" -C $src
  cmake -S $src/llama.cpp -B /tmp/b$b -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_RPC=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=$bin -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$bin > /tmp/cfg$b.log 2>&1 \
    || { tail -30 /tmp/cfg$b.log; return 1; }
  cmake --build /tmp/b$b -j "$2" --target llama-simple llama-completion llama-bench > /tmp/build$b.log 2>&1 \
    || { tail -40 /tmp/build$b.log; return 1; }
  scripts/build_hooks.sh $src/llama.cpp $bin b$b-cuda && grep -h "CUPTI mode" build/hooks-b$b-cuda.configure.log
}

if [ "$step" = build ]; then
  t0=$(date +%s)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  jobs=$(( $(nproc) / $# ))
  for tar in "$@"; do build_one "$tar" $jobs > /tmp/build-$(basename "$tar").out 2>&1 & done
  wait
  for tar in "$@"; do cat /tmp/build-$(basename "$tar").out; done
  echo "builds took $(( $(date +%s) - t0 )) s"; ls /tmp/b*/bin/libggml-trace-hooks.so
  exit 0
fi

overhead() {  # overhead MODEL REPS: llama-bench -ngl 99 on one GPU, the four modes interleaved
  local model=$1 reps=$2 bin=/tmp/b10531/bin hooks=/tmp/b10531/bin/libggml-trace-hooks.so
  for rep in $(seq "$reps"); do
    for mode in ${MODES:-plain default timing cupti}; do
      pre=()
      case $mode in
        default) pre=(env LD_PRELOAD=$hooks GGML_TRACE_OUTPUT=/tmp/ov-$mode-$rep.ggmltrace) ;;
        timing)  pre=(env LD_PRELOAD=$hooks GGML_TRACE_OUTPUT=/tmp/ov-$mode-$rep.ggmltrace GGML_TRACE_DEVICE_TIMING=1) ;;
        cupti)   pre=(env LD_PRELOAD=$hooks GGML_TRACE_OUTPUT=/tmp/ov-$mode-$rep.ggmltrace GGML_TRACE_CUPTI=1) ;;
        cupti-kernels) pre=(env LD_PRELOAD=$hooks GGML_TRACE_OUTPUT=/tmp/ov-$mode-$rep.ggmltrace GGML_TRACE_CUPTI=kernels) ;;
      esac
      rm -f /tmp/ov-$mode-$rep.ggmltrace*
      CUDA_VISIBLE_DEVICES=0 "${pre[@]}" $bin/llama-bench -m "$model" -ngl 99 -p 512 -n 128 -r 3 -o csv 2>/dev/null \
        | python3 -c "import csv,sys; [print('bench', '$(basename "$model")', '$mode', $rep, r['n_prompt'], r['n_gen'], r['avg_ts'], r['stddev_ts']) for r in csv.DictReader(sys.stdin)]"
    done
  done
}

if [ "$step" = overhead ]; then  # overhead MODEL REPS [MODEL REPS ...]: llama-bench only
  while [ $# -ge 2 ]; do overhead "$1" "$2"; shift 2; done
  exit 0
fi

if [ "$step" = bigbench ]; then
  wheel=$1; out=$2
  exec > >(tee -a "$out/gpu.log") 2>&1
  export GGML_TRACE_CUPTI_LIB=$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)
  python3 -m pip install -q --no-deps --target /tmp/site "$wheel" && export PYTHONPATH=/tmp/site:$PYTHONPATH
  t0=$(date +%s)
  [ -f /tmp/big.gguf ] || python3 scripts/make_tiny_model.py /tmp/big.gguf --layers 8 --embd 2048 --heads 16 --ff 5632 || exit 1
  echo "model $(stat -c %s /tmp/big.gguf) bytes in $(( $(date +%s) - t0 )) s"
  overhead /tmp/big.gguf 2
  exit 0
fi

model=$1; out=$2
mkdir -p "$out"
exec > >(tee -a "$out/gpu.log") 2>&1
cupti=$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)
echo "libcupti: ${cupti:-none}"; export GGML_TRACE_CUPTI_LIB=$cupti
nvidia-smi topo -m | head -5
gen="-n 16 -p the_of_and --temp 0 --seed 1 -no-cnv"

trace() {  # trace BUILD NAME GPUS CMD...: traced with device timing + CUPTI (+ NVML), then untraced
  local b=$1 name=$2 gpus=$3; shift 3
  local bin=/tmp/b$b/bin
  echo "== b$b $name (CUDA_VISIBLE_DEVICES=$gpus)"
  CUDA_VISIBLE_DEVICES=$gpus python3 -m ggml_trace.tracer.cli record --hooks $bin/libggml-trace-hooks.so --device-timing --cupti \
    -o "$out/$name.ggmltrace" -- $bin/"$@" > /tmp/$name.out 2> /tmp/$name.err
  echo "rc=$? $(grep -E '^ggml-trace' /tmp/$name.err | tr '\n' ' ')"
  CUDA_VISIBLE_DEVICES=$gpus $bin/"$@" > /tmp/$name.plain 2>/dev/null
  cmp -s /tmp/$name.out /tmp/$name.plain && echo "same output as untraced" || { echo "OUTPUT DIFFERS from untraced"; grep -iE "error|abort" /tmp/$name.err | head -3; }
}
# The traced runs of each build that was built (BUILDS limits them, e.g. BUILDS=11434).
for b in ${BUILDS:-10531 11434}; do
  [ -x /tmp/b$b/bin/libggml-trace-hooks.so ] || continue
  trace $b b$b-simple-1gpu 0 llama-simple -m "$model" -n 32 "the of and"
  trace $b b$b-layer-2gpu 0,1 llama-completion -m "$model" $gen -ngl 99 -sm layer
  trace $b b$b-nkvo-1gpu 0 llama-completion -m "$model" $gen -ngl 99 -nkvo
  trace $b b$b-partial-nkvo-1gpu 0 llama-completion -m "$model" $gen -ngl 2 -nkvo
  trace $b b$b-bench-1gpu 0 llama-bench -m "$model" -ngl 99 -p 512 -n 32 -r 1
  trace $b b$b-row-2gpu 0,1 llama-completion -m "$model" $gen -ngl 99 -sm row
  tail -3 /tmp/b$b-row-2gpu.err
done
if [ -z "${NO_OVERHEAD:-}" ]; then
  echo "== overhead: llama-bench -ngl 99 on one GPU, modes interleaved (same binary)"
  overhead "$model" 3
fi
ls -la "$out"
