#!/usr/bin/env bash
# The tensor-parallel scratch fix (patches/meta-allreduce-scratch.patch) on a CUDA GPU host, after
# `bench/gpu/h200_session.sh build .../llama-10531-slim.tar.xz` made /tmp/b10531/bin. From the repository root:
#   bench/gpu/tp_fix_h200.sh fixlib                 # /tmp/tpfix/libggml-base.so* patched; /tmp/b10531/bin stays unpatched
#   bench/gpu/tp_fix_h200.sh bench MODEL REPS       # llama-bench -sm tensor, unpatched and patched interleaved
#                                                   # (GGML_CUDA_ALLREDUCE=none: the fallback the patch changes)
#   bench/gpu/tp_fix_h200.sh delaycost MODEL REPS   # llama-bench on one GPU: untraced, traced, an unused rule, a delay
# The patch changes only ggml-base and no ABI: the same programs run patched with
# LD_LIBRARY_PATH=/tmp/tpfix (the binaries carry RUNPATH, which LD_LIBRARY_PATH overrides; `fixlib` checks it).
set -uo pipefail
step=$1; shift
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/bench/gpu/install_here.sh" || exit 1
bin=/tmp/b10531/bin build=/tmp/b10531 src=/tmp/src10531/llama.cpp fix=/tmp/tpfix
patch_file=$here/patches/meta-allreduce-scratch.patch

if [ "$step" = fixlib ]; then
  if [ ! -f $fix/libggml-base.so ]; then
    mkdir -p $fix /tmp/tpplain && cp -a $bin/libggml-base.so* /tmp/tpplain/
    (cd $src && patch -p1 --quiet --no-backup-if-mismatch < "$patch_file") || exit 1
    cmake --build $build -j "$(nproc)" --target ggml-base > /tmp/tpfix-build.log 2>&1 || { tail -30 /tmp/tpfix-build.log; exit 1; }
    cp -a $bin/libggml-base.so* $fix/ && cp -a /tmp/tpplain/* $bin/
    (cd $src && patch -R -p1 --quiet --no-backup-if-mismatch < "$patch_file")
  fi
  readelf -d $bin/llama-completion | grep -E "RPATH|RUNPATH"
  LD_LIBRARY_PATH=$fix ldd $bin/llama-bench | grep ggml-base
  cmp -s $fix/libggml-base.so $bin/libggml-base.so && { echo "patched library is the unpatched one"; exit 1; }
  echo "fixlib ready"; exit 0
fi

bench_row() {  # bench_row LABEL ARGS...: llama-bench CSV rows as 'bench LABEL n_prompt n_gen avg_ts stddev_ts'
  local label=$1; shift
  "$@" -o csv 2>/dev/null | python3 -c "
import csv, sys
for r in csv.DictReader(sys.stdin):
    print('bench', '$label', r['n_prompt'], r['n_gen'], r['avg_ts'], r['stddev_ts'], flush=True)"
}

if [ "$step" = bench ]; then  # bench MODEL REPS
  model=$1; reps=$2
  for rep in $(seq "$reps"); do
    for way in plain fix default-path; do  # default-path: the build's own allreduce (internal here), for scale
      lib=""; [ $way = fix ] && lib=$fix
      path=none; [ $way = default-path ] && path=""
      LD_LIBRARY_PATH=$lib GGML_CUDA_ALLREDUCE=$path CUDA_VISIBLE_DEVICES=0,1 \
        bench_row "$(basename "$model") $way $rep" $bin/llama-bench -m "$model" -ngl 99 -sm tensor -p 512 -n 128 -r 3
    done
  done
  exit 0
fi

if [ "$step" = delaycost ]; then  # delaycost MODEL REPS
  model=$1; reps=$2; rec=(python3 -m ggml_trace.tracer.cli record --no-nvml --hooks $bin/libggml-trace-hooks.so -o /tmp/dc.ggmltrace)
  for rep in $(seq "$reps"); do
    for way in untraced traced unused-rule delay-100us; do
      pre=(); case $way in
        traced) pre=("${rec[@]}" --) ;;
        unused-rule) pre=("${rec[@]}" --delay "CUDA0:graph_compute,graph=100000000:100" --) ;;
        delay-100us) pre=("${rec[@]}" --delay "CUDA0:graph_compute,split=0:100" --) ;;
      esac
      CUDA_VISIBLE_DEVICES=0 bench_row "$(basename "$model") $way $rep" "${pre[@]}" $bin/llama-bench -m "$model" -ngl 99 -p 512 -n 128 -r 3
      [ $way = delay-100us ] && python3 -m ggml_trace.tracer.cli races /tmp/dc.ggmltrace --json | python3 -c "
import json, sys; d = json.load(sys.stdin); print('races in the delayed trace:', len(d['races']))"
    done
  done
  exit 0
fi
echo "unknown step $step"; exit 2
