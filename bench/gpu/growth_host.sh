#!/usr/bin/env bash
# The writer on a file growing at full speed, on another host: this tree's writer, BASE's (an
# earlier commit's `native_hooks/` and `bench/`: git archive COMMIT native_hooks bench), and this
# tree's with 1, 4 and 8 grow threads instead of its 2, each on /dev/shm and on the disk under
# /tmp, REPS times (default 2) interleaved. From the repository root:
#   [BASE=DIR] bench/gpu/growth_host.sh OUT_DIR [REPS]
set -uo pipefail
out=${1:?usage: [BASE=DIR] $0 OUT_DIR [REPS]}; reps=${2:-2}
mkdir -p "$out"
exec > >(tee -a "$out/growth.log") 2>&1
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(uname -r)"
df -T /tmp /dev/shm
build() {  # TREE WRITER_SOURCE EXE
  (cd "$1" && g++ -O2 -std=c++17 -Inative_hooks bench/bench_writer.cpp "$2" native_hooks/delay_rules.cpp -lpthread -o "$3")
}
build . native_hooks/trace_writer.cpp /tmp/bw-main || exit 1
variants="main"
if [ -n "${BASE:-}" ]; then build "$BASE" native_hooks/trace_writer.cpp /tmp/bw-base && variants="base $variants"; fi
for n in 1 4 8; do
  sed "s/^const int GROW_THREADS .*/const int GROW_THREADS = $n;/" native_hooks/trace_writer.cpp > native_hooks/grow$n.cpp
  build . native_hooks/grow$n.cpp /tmp/bw-g$n && variants="$variants g$n"
  rm -f native_hooks/grow$n.cpp
done
for rep in $(seq "$reps"); do
  for v in $variants; do
    for dir in /dev/shm /tmp; do
      echo "$v $dir: $(BENCH_DIR=$dir timeout 120 /tmp/bw-$v 1000000 1 | grep -E 'full speed|bursts|byte ranges' | tr '\n' ' ')"
    done
  done
done
