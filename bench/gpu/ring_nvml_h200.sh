#!/usr/bin/env bash
# GPU counters under the flight recorder on a GPU host, after `bench/gpu/h200_session.sh build
# .../llama-10531-slim.tar.xz` made /tmp/b10531/bin. From the repository root:
#   bench/gpu/ring_nvml_h200.sh MODEL OUT_DIR [SECONDS]
# llama-bench (-ngl 99) runs SECONDS (default 40) under `record --nvml --nvml-interval-ms 2` twice:
# with a time ring (--ring 2) and with a size ring (--ring 64M), then SIGTERM (as a crash). Each
# file's NVML readings should cover its window (and a margin), not the whole run.
set -uo pipefail
model=${1:?usage: $0 MODEL OUT_DIR [SECONDS]}; out=${2:?usage: $0 MODEL OUT_DIR [SECONDS]}; secs=${3:-40}
bin=/tmp/b10531/bin
mkdir -p "$out"
exec > >(tee -a "$out/ring-nvml.log") 2>&1
. bench/gpu/install_here.sh || exit 1
python3 -c 'import pynvml; pynvml.nvmlInit(); print("NVML", pynvml.nvmlSystemGetDriverVersion())'
for ring in 2 64M; do
  f=$out/ring-$ring.ggmltrace
  echo "== llama-bench under --ring $ring --nvml for $secs s"
  python3 -m ggml_trace.tracer.cli record --hooks $bin/libggml-trace-hooks.so --ring $ring --nvml --nvml-interval-ms 2 \
    -o $f -- $bin/llama-bench -m "$model" -p 16 -n 32 -r 1000000 -ngl 99 > $out/ring-$ring.out 2> $out/ring-$ring.err &
  rec=$!
  sleep 3; prog=$(pgrep -P $rec | head -1)
  for ((s = 0; s < secs; s += 10)); do
    sleep 10
    printf '%4d s  file %s bytes  recorder RSS %s KiB\n' $((s + 10)) "$(stat -c %s $f)" "$(ps -o rss= -p $rec)"
  done
  kill -TERM $prog; wait $rec
  tail -2 $out/ring-$ring.err
  python3 - "$f" <<'PY'
import sys
from ggml_trace import analysis
t = analysis.load(sys.argv[1])
g, w = t.gpu_samples, t.ring
print(f"window {w.start_ns / 1e9:.2f}-{w.end_ns / 1e9:.2f} s of the run; NVML readings {len(g)}, "
      f"from {g['t'].min() / 1e9:.2f} to {g['t'].max() / 1e9:.2f} s ({(g['t'].max() - g['t'].min()) / 1e9:.2f} s), "
      f"metrics {sorted(set(g['metric'].astype(str)))}; status {t.meta.get('nvml.status')}")
PY
done
