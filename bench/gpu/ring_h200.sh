#!/usr/bin/env bash
# The flight recorder on CUDA GPUs, after `bench/gpu/h200_session.sh build .../llama-10531-slim.tar.xz`
# made /tmp/b10531/bin. From the repository root:
#   bench/gpu/ring_h200.sh MODEL OUT_DIR [SECONDS]
# Two GPUs: llama-bench -sm tensor (GGML_CUDA_ALLREDUCE=none: the meta backend's butterfly and its
# scratch race) runs SECONDS (default 60) under `record --ring 2 --cupti --device-timing`, twice:
# with a 200 us delay before CUDA1's ADD computes (the race manifests) and without. One GPU:
# llama-bench fully offloaded, and partly (-ngl 2: CPU and CUDA splits, async copies). Halfway
# through each, `ggml-trace snapshot PID`; at the end SIGTERM (as a crash). Every file is loaded
# and analysed: the window it holds, its size, the race verdicts.
set -uo pipefail
model=${1:?usage: $0 MODEL OUT_DIR [SECONDS]}; out=${2:?usage: $0 MODEL OUT_DIR [SECONDS]}; secs=${3:-60}
bin=/tmp/b10531/bin work=/tmp/ring
rm -rf $work; mkdir -p "$out" $work
exec > >(tee -a "$out/ring.log") 2>&1
. bench/gpu/install_here.sh || exit 1
export GGML_TRACE_CUPTI_LIB=${GGML_TRACE_CUPTI_LIB:-$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)}
export GGML_CUDA_ALLREDUCE=none

if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then ways="delay-gpu1 none"; else ways="one-gpu partial"; fi
for way in $ways; do
  delay=(); [ $way = delay-gpu1 ] && delay=(--delay 'CUDA1:graph_compute,op=ADD:200')
  case $way in one-gpu) how=(-ngl 99);; partial) how=(-ngl 2);; *) how=(-ngl 99 -sm tensor);; esac
  echo "== $way: llama-bench ${how[*]} under --ring 2 for $secs s"
  python3 -m ggml_trace.tracer.cli record --no-nvml --hooks $bin/libggml-trace-hooks.so --ring 2 --cupti --device-timing \
    "${delay[@]}" -o $work/$way.ggmltrace -- $bin/llama-bench -m "$model" -p 16 -n 32 -r 1000000 "${how[@]}" \
    > $work/$way.out 2> $work/$way.err &
  rec=$!
  sleep 5; prog=$(pgrep -P $rec | head -1)
  for ((s = 5; s < secs; s += 5)); do
    sleep 5
    printf '%4d s  %s bytes\n' $((s + 5)) "$(stat -c %s $work/$way.ggmltrace)"
    if [ $((s + 5)) -eq $((secs / 2 / 5 * 5)) ]; then
      python3 -m ggml_trace.tracer.cli snapshot $prog -o $work/$way.snapshot.ggmltrace
    fi
  done
  kill -TERM $prog; wait $rec
  tail -2 $work/$way.err
  for f in $work/$way.snapshot.ggmltrace $work/$way.ggmltrace; do
    echo "-- $(basename $f) ($(stat -c %s $f) bytes)"
    python3 -m ggml_trace.tracer.cli summary $f | grep -v '^name\|^CUDA\|^CPU' | cut -c1-400
    python3 -m ggml_trace.tracer.cli races $f --json > $f.races.json; echo "races exit $?"
    python3 - $f.races.json <<'EOF'
import collections, json, sys
d = json.load(open(sys.argv[1]))
found = d.get("races") or d.get("findings") or []
print("findings", len(found), dict(collections.Counter(r.get("verdict") for r in found)))
EOF
  done
  cp $work/$way.snapshot.ggmltrace.races.json "$out/ring-$way.snapshot.races.json"
  cp $work/$way.ggmltrace.races.json "$out/ring-$way.races.json"
done
