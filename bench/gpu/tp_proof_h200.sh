#!/usr/bin/env bash
# The tensor-parallel proof runs on two CUDA GPUs, after `bench/gpu/h200_session.sh build
# .../llama-10531-slim.tar.xz` made /tmp/b10531/bin (CUDA b10531 + hooks with CUPTI). From the
# repository root:
#   bench/gpu/tp_proof_h200.sh MODEL OUT_DIR
# 1. the butterfly's scratch race with device timing (GGML_CUDA_ALLREDUCE=none): no delay, a 200 us
#    delay before CUDA1's ADDs, the same on CUDA0 (bench/gpu/tp_h200.py --device-timing);
# 2. `ggml-trace force` on the undelayed device-timed trace (--every-graph);
# 3. the build's default path (NCCL where the build found it) with CUPTI and device timing: which
#    allreduce ran, its calls, no race; then a 2 ms delay before CUDA1's part of every allreduce
#    (the barrier holds CUDA0's part); then GGML_CUDA_ALLREDUCE=internal with CUPTI;
# 4. a CUDA stream delay as CUPTI sees it (bench/gpu/delay_h200.sh), on one GPU.
# Writes at most 8 files into OUT_DIR (the device tool's limit). TP_CUPTI=1: step 1 records with --cupti.
set -uo pipefail
model=${1:?usage: $0 MODEL OUT_DIR}; out=${2:?usage: $0 MODEL OUT_DIR}
bin=/tmp/b10531/bin work=/tmp/tpproof
mkdir -p "$out" $work
exec > >(tee -a "$out/proof.log") 2>&1
. bench/gpu/install_here.sh || exit 1
export GGML_TRACE_CUPTI_LIB=${GGML_TRACE_CUPTI_LIB:-$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)}
gen=(-n 16 -p "the of and" --temp 0 --seed 1 -no-cnv)
rec=(python3 -m ggml_trace.tracer.cli record --no-nvml --hooks $bin/libggml-trace-hooks.so)
steps=${STEPS:-1234}
t0=$(date +%s)

if [[ $steps == *1* ]]; then
echo "== 1. scratch race, device-timed"
timeout 300 python3 bench/gpu/tp_h200.py $bin "$model" $work/tp --runs 10 --control-runs 5 --device-timing ${TP_CUPTI:+--cupti} \
  | grep -v '^{\|^ ' | cut -c1-300
cp $work/tp/summary.json "$out/tp-summary.json"
cp $work/tp/tp-delay-gpu1.ggmltrace "$out/tp-dt-delay-gpu1.ggmltrace"
cp $work/tp/tp-none.ggmltrace "$out/tp-dt-none.ggmltrace"
echo "step 1 took $(( $(date +%s) - t0 )) s"
fi

if [[ $steps == *2* ]]; then
echo "== 2. force on the undelayed trace"
GGML_CUDA_ALLREDUCE=none timeout 200 python3 -m ggml_trace.tracer.cli force $work/tp/tp-none.ggmltrace --every-graph \
  --runs 10 --baseline-runs 2 --out $work/force --json > "$out/force.json"
echo "force exit $?"; python3 -c "import json; d=json.load(open('$out/force.json')); print({k: d.get(k) for k in ('runs','manifested_runs','diverged_runs','delay_us','command')})"
echo "step 2 done at $(( $(date +%s) - t0 )) s"
fi

if [[ $steps == *3* ]]; then
echo "== 3. the default allreduce path"
timeout 60 "${rec[@]}" --cupti --device-timing -o $work/internal.ggmltrace -- $bin/llama-completion -m "$model" "${gen[@]}" \
  -ngl 99 -sm tensor > $work/internal.out 2>/dev/null
timeout 60 "${rec[@]}" --device-timing --delay 'CUDA1:comm_allreduce:2000' -o $work/internal-delay.ggmltrace -- \
  $bin/llama-completion -m "$model" "${gen[@]}" -ngl 99 -sm tensor > $work/internal-delay.out 2>/dev/null
$bin/llama-completion -m "$model" "${gen[@]}" -ngl 99 -dev CUDA0 2>/dev/null > $work/one.out
timeout 60 env GGML_CUDA_ALLREDUCE=internal "${rec[@]}" --cupti --device-timing -o $work/internal-ar.ggmltrace -- \
  $bin/llama-completion -m "$model" "${gen[@]}" -ngl 99 -sm tensor > $work/internal-ar.out 2>/dev/null
for t in internal internal-delay internal-ar; do
  echo "-- $t: output equals one GPU's: $(cmp -s $work/$t.out $work/one.out && echo yes || echo no)"
  python3 -m ggml_trace.tracer.cli summary $work/$t.ggmltrace | tail -4
  python3 -m ggml_trace.tracer.cli races $work/$t.ggmltrace | head -3
  cp $work/$t.ggmltrace "$out/"
done
python3 - $work/internal-delay.ggmltrace <<'EOF'
import sys
from ggml_trace.analysis import load
from ggml_trace.analysis.allreduce import held_by_delays
h = held_by_delays(load(sys.argv[1]))
late = h["after_ns"] / 1000
print(f"delays {len(h)}; CUDA0 part ends after CUDA1's delay in {(late >= 0).sum()} of {len(h)} calls;"
      f" CUDA0 end minus delay end: min {late.min():.1f} us, median {late.median():.1f} us")
EOF
echo "step 3 done at $(( $(date +%s) - t0 )) s"
fi

if [[ $steps == *4* ]]; then
echo "== 4. CUDA stream delay seen by CUPTI"
CUDA_VISIBLE_DEVICES=0 timeout 60 bench/gpu/delay_h200.sh /tmp/b10531 "$model" $work/delay
fi
echo "all done at $(( $(date +%s) - t0 )) s"
