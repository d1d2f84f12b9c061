#!/usr/bin/env bash
# CUPTI's two modes on one GPU (docs/gpu.md): what each records (the same llama-completion run traced
# in each) and what each costs (llama-bench: plain, --cupti graphs, --cupti kernels, interleaved).
# usage, from the repository root on the GPU host:
#   bench/gpu/cupti_modes.sh SLIM_TAR GGUF_WHEEL OUT [REPS]     (SLIM_TAR: llama-10531-slim.tar.xz)
set -uo pipefail
tar=$1; wheel=$2; out=$3; reps=${4:-3}
mkdir -p "$out"
t0=$(date +%s)
bench/gpu/h200_session.sh build "$tar" > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export GGML_TRACE_CUPTI_LIB=$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)
. bench/gpu/install_here.sh || exit 1
python3 -m pip install -q --no-deps --target /tmp/site "$wheel" && export PYTHONPATH=/tmp/site:$PYTHONPATH
[ -f /tmp/big.gguf ] || python3 scripts/make_tiny_model.py /tmp/big.gguf --layers 8 --embd 2048 --heads 16 --ff 5632
[ -f /tmp/tiny.gguf ] || python3 scripts/make_tiny_model.py /tmp/tiny.gguf
bin=/tmp/b10531/bin
gen=(-n 16 -p the_of_and --temp 0 --seed 1 -no-cnv -ngl 99)
CUDA_VISIBLE_DEVICES=0 $bin/llama-completion -m /tmp/tiny.gguf "${gen[@]}" > /tmp/plain.out 2>/dev/null
for mode in graphs kernels; do
  CUDA_VISIBLE_DEVICES=0 python3 -m ggml_trace.tracer.cli record --hooks $bin/libggml-trace-hooks.so --cupti $mode \
    --no-nvml -o "$out/cupti-$mode.ggmltrace" -- $bin/llama-completion -m /tmp/tiny.gguf "${gen[@]}" \
    > /tmp/cupti-$mode.out 2> /tmp/cupti-$mode.err
  echo "$mode: rc=$? $(grep -E '^ggml-trace' /tmp/cupti-$mode.err | tr '\n' ' ')"
  cmp -s /tmp/cupti-$mode.out /tmp/plain.out && echo "$mode: same output as untraced" || echo "$mode: OUTPUT DIFFERS"
done
python3 bench/gpu/cupti_modes.py "$out/cupti-graphs.ggmltrace" "$out/cupti-kernels.ggmltrace" | tee "$out/modes.json"
MODES="plain cupti cupti-kernels" bench/gpu/h200_session.sh overhead /tmp/big.gguf "$reps" /tmp/tiny.gguf "$reps" \
  | tee "$out/bench.log"
echo "total: $(( $(date +%s) - t0 )) s"
