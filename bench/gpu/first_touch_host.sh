#!/usr/bin/env bash
# A fresh process's first touch of memory on another host, and what it does to a one-shot load:
# bench/probes/first_touch.c (huge pages, then 4 KiB pages, 3 rounds), then REPS one-shot loads of
# a 3 M-event synthetic trace, with numpy's huge pages and without (NUMPY_MADVISE_HUGEPAGE=0),
# interleaved. From the repository root:   [PYTHON=python3] bench/gpu/first_touch_host.sh OUT_DIR [REPS]
set -uo pipefail
out=${1:?usage: $0 OUT_DIR [REPS]}; reps=${2:-5}; py=${PYTHON:-python3}
mkdir -p "$out"
exec > >(tee -a "$out/first-touch.log") 2>&1
echo "host: $(nproc) cores, $(uname -r); virtio drivers: $(ls /sys/bus/virtio/drivers 2>/dev/null | tr '\n' ' ')"
echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
. bench/gpu/install_here.sh || exit 1
gcc -O2 -o /tmp/first-touch bench/probes/first_touch.c || exit 1
for i in 1 2 3; do /tmp/first-touch 1024 1; /tmp/first-touch 1024 0; sleep 3; done
"$py" -c "import sys; sys.path[:0] = ['tests']; from tracegen import synth_trace; synth_trace('/tmp/ft.trace', 3_000_000, threads=4)"
load='import time; from ggml_trace import analysis; t = time.perf_counter(); analysis.load("/tmp/ft.trace"); print(round(time.perf_counter() - t, 3))'
for i in $(seq "$reps"); do
  echo "one-shot load, 3 M events: huge pages $("$py" -c "$load") s, NUMPY_MADVISE_HUGEPAGE=0 $(NUMPY_MADVISE_HUGEPAGE=0 "$py" -c "$load") s"
  sleep 3
done
