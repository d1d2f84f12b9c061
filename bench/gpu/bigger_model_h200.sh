#!/usr/bin/env bash
# On the GPU host, after capture_h200.sh built /tmp/b: a ~1.6 GB random-weight model (kernels that
# are not trivially short), llama-bench with and without tracing, and a two-GPU -sm layer capture.
#   bench/gpu/bigger_model_h200.sh GGUF_WHEEL OUT_DIR
set -uo pipefail
wheel=$1; out=$2
exec > >(tee -a "$out/gpu-big.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/site "$wheel" && export PYTHONPATH=/tmp/site:$PWD
python3 -m tracer.nvml > "$out/nvml.json"; head -c 1500 "$out/nvml.json"
t0=$(date +%s)
python3 scripts/make_tiny_model.py /tmp/big.gguf --layers 8 --embd 2048 --heads 16 --ff 5632 || exit 1
ls -la /tmp/big.gguf; echo "model took $(( $(date +%s) - t0 )) s"
bin=/tmp/b/bin; hooks=$bin/libggml-trace-hooks.so
for rep in 1 2 3; do
  for mode in plain traced; do
    pre=""; [ $mode = traced ] && pre="env GGML_TRACE_OUTPUT=/tmp/bigbench-$rep.ggmltrace LD_PRELOAD=$hooks"
    CUDA_VISIBLE_DEVICES=0 $pre $bin/llama-bench -m /tmp/big.gguf -ngl 99 -p 512 -n 128 -r 3 -o csv 2>/dev/null \
      | awk -F, -v m=$mode -v r=$rep 'NR>1 {print "bench", m, r, $(NF-1), $NF, $(NF-14), $(NF-15)}'
  done
done
CUDA_VISIBLE_DEVICES=0,1 GGML_TRACE_OUTPUT=$out/big-layer-2gpu.ggmltrace LD_PRELOAD=$hooks \
  $bin/llama-completion -m /tmp/big.gguf -n 8 -p the_of_and --temp 0 --seed 1 -no-cnv -ngl 99 -sm layer > /tmp/bl.out 2>/tmp/bl.err
echo "big -sm layer rc=$?"; CUDA_VISIBLE_DEVICES=0,1 $bin/llama-completion -m /tmp/big.gguf -n 8 -p the_of_and --temp 0 --seed 1 -no-cnv -ngl 99 -sm layer > /tmp/bl.plain 2>/dev/null
cmp -s /tmp/bl.out /tmp/bl.plain && echo "same output as untraced" || echo "OUTPUT DIFFERS"
ls -la "$out"
