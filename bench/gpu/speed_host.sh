#!/usr/bin/env bash
# The speed figures of `make bench` on another host (the GPU host's CPUs; no GPU is used), side by
# side with an earlier commit's analysis when BASE names a directory holding that commit's tree
# (git archive COMMIT | tar -x -C BASE), installed beside this one (install_here.sh). From the
# repository root:
#   [BASE=DIR] [PYTHON=python3] [THREADS="1 2 4 8"] [SKIP_WRITER=1] bench/gpu/speed_host.sh OUT_DIR
# The writer: bench/bench_writer.cpp built here with g++ -O2, a growing file on /dev/shm and on the
# disk under /tmp, and a full ring. The loader and the race analysis: bench_load.py and
# bench_races.py of this tree, then BASE's (each generates the same synthetic traces); with THREADS,
# this tree's loader and race analysis again with each of those GGML_TRACE_THREADS.
set -uo pipefail
out=${1:?usage: [BASE=DIR] $0 OUT_DIR}
mkdir -p "$out"
exec > >(tee -a "$out/speed.log") 2>&1
. bench/gpu/install_here.sh || exit 1
base_site=/tmp/ggml-trace-base-site
if [ -n "${BASE:-}" ]; then install_tree "$BASE" "$base_site" || exit 1; fi
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(uname -r)"
"${PYTHON:-python3}" -c 'import numpy, pandas, sys; print("python", sys.version.split()[0], "numpy", numpy.__version__, "pandas", pandas.__version__)'
for tree in "$PWD" ${BASE:+"$BASE"}; do
  [ -d "$tree/native_hooks" ] && [ -z "${SKIP_WRITER:-}" ] || continue
  (cd "$tree" && g++ -O2 -std=c++17 -Inative_hooks bench/bench_writer.cpp native_hooks/trace_writer.cpp \
    native_hooks/delay_rules.cpp -lpthread -o /tmp/bench-writer) || exit 1
  for dir in /dev/shm /tmp; do
    echo "== writer of $tree, file on $dir"
    BENCH_DIR=$dir /tmp/bench-writer 200000 1
  done
  /tmp/bench-writer 200000 1 ring
done
for tree in "$PWD" ${BASE:+"$BASE"}; do
  echo "== analysis of $tree"
  site=$GGML_TRACE_SITE; [ "$tree" = "$PWD" ] || site=$base_site
  (cd "$tree" && export PYTHONPATH=$site:$PYTHONPATH && "${PYTHON:-python3}" bench/bench_load.py --events 3000000 && "${PYTHON:-python3}" bench/bench_races.py --events 1000000)
done
for n in ${THREADS:-}; do
  echo "== analysis of $PWD, GGML_TRACE_THREADS=$n"
  GGML_TRACE_THREADS=$n "${PYTHON:-python3}" bench/bench_load.py --events 3000000
  GGML_TRACE_THREADS=$n "${PYTHON:-python3}" bench/bench_races.py --events 1000000
done
