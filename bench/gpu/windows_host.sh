#!/usr/bin/env bash
# The windowed race analysis (`ggml-trace races --windows`) on another host, side by side with an
# earlier commit's when BASE names a directory holding that commit's tree (git archive COMMIT | tar
# -x -C BASE), installed beside this one (install_here.sh). From the repository root:
#   [BASE=DIR] [EVENTS=N] [PYTHON=python3] bench/gpu/windows_host.sh OUT_DIR
# bench/bench_big_trace.py generates a trace of EVENTS events (default 6*10^7), then this tree's
# command and BASE's analyse it in turn, twice, each in a process of its own (time, peak RSS).
set -uo pipefail
out=${1:?usage: [BASE=DIR] [EVENTS=N] $0 OUT_DIR}
mkdir -p "$out"
exec > >(tee -a "$out/windows.log") 2>&1
py=${PYTHON:-python3}
. bench/gpu/install_here.sh || exit 1
base_site=/tmp/ggml-trace-base-site
if [ -n "${BASE:-}" ]; then install_tree "$BASE" "$base_site" || exit 1; fi
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(uname -r)"
"$py" -c 'import numpy, pandas, sys; print("python", sys.version.split()[0], "numpy", numpy.__version__, "pandas", pandas.__version__)'
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$py" bench/bench_big_trace.py --events "${EVENTS:-60000000}" --dir "$dir" --keep -- --windows 2>&1 | grep -v '^ggml-trace: '
for round in 1 2; do
  for site in ${BASE:+"$base_site"} "$GGML_TRACE_SITE"; do
    echo "== round $round: $([ "$site" = "$GGML_TRACE_SITE" ] && echo "$PWD" || echo "$BASE")"
    "$py" bench/bench_big_trace.py --trace "$dir/big.ggmltrace" --site "$site" -- --windows 2>&1 | grep -v '^ggml-trace: '
  done
done
