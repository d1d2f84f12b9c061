#!/usr/bin/env bash
# A CUDA stream delay, seen by CUPTI (docs/delay.md). On a GPU host, from the repository root:
#   bench/gpu/delay_h200.sh BUILD_DIR MODEL [OUT_DIR]
# BUILD_DIR: a CUDA llama.cpp build whose bin/ holds llama-completion and the hook library built
# against the same sources with CUPTI's headers (scripts/build_hooks.sh SRC BUILD_DIR/bin NAME; see
# docs/gpu.md). Records one run of the model fully offloaded, with
#   --cupti --delay 'CUDA0:graph_compute,graph=5:2000'   (DELAY_SPEC overrides it)
# then prints, for each injected delay, the gap on the stream before the targeted kernels and the
# stall (python -m ggml_trace.analysis.delay, also runnable anywhere on the trace it writes). Exit 1 when a
# stall is more than 10 % off the request.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR MODEL [OUT_DIR]}; model=${2:?usage: $0 BUILD_DIR MODEL [OUT_DIR]}
out=${3:-/tmp/delay-h200}
bin=$build/bin
spec=${DELAY_SPEC:-CUDA0:graph_compute,graph=5:2000}
mkdir -p "$out"
. bench/gpu/install_here.sh || exit 1
# CUPTI may not be on the loader's path (the CUDA toolkit's extras/CUPTI/lib64)
if [ -z "${GGML_TRACE_CUPTI_LIB:-}" ]; then
  GGML_TRACE_CUPTI_LIB=$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1 || true)
  export GGML_TRACE_CUPTI_LIB
fi
echo "libcupti: ${GGML_TRACE_CUPTI_LIB:-none}; rule: $spec"
trace=$out/delay.ggmltrace
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} python3 -m ggml_trace.tracer.cli record --hooks "$bin/libggml-trace-hooks.so" \
  --cupti --delay "$spec" -o "$trace" -- \
  "$bin/llama-completion" -m "$model" -n 16 -p "the of and" --temp 0 --seed 1 -no-cnv -ngl 99 > "$out/delay.out"
python3 -m ggml_trace.analysis.delay "$trace" --tolerance 0.10
