#!/usr/bin/env bash
# The hooks' thread-local model on a real program, after `bench/gpu/h200_session.sh build
# .../llama-10531-slim.tar.xz` made /tmp/b10531/bin (hooks built as this tree builds them:
# initial-exec). From the repository root:
#   bench/gpu/tls_h200.sh MODEL OUT_DIR [REPS]
# Builds the same hooks with the default (global-dynamic) model beside them, then runs llama-bench
# -ngl 99 on one GPU plain, under each, REPS times (default 5) interleaved: tokens/s.
set -uo pipefail
model=${1:?usage: $0 MODEL OUT_DIR [REPS]}; out=${2:?usage: $0 MODEL OUT_DIR [REPS]}; reps=${3:-5}
bin=/tmp/b10531/bin
mkdir -p "$out"
exec > >(tee -a "$out/tls.log") 2>&1
rm -rf /tmp/gd && mkdir -p /tmp/gd/tests /tmp/gd/bench && cp -r CMakeLists.txt native_hooks scenarios /tmp/gd/ \
  && cp -r tests/programs /tmp/gd/tests/ && cp bench/bench_writer.cpp /tmp/gd/bench/
sed -i 's/ *-ftls-model=initial-exec//' /tmp/gd/CMakeLists.txt
cmake -S /tmp/gd -B /tmp/hooks-gd -DGGML_SOURCE_DIR=/tmp/src10531/llama.cpp -DGGML_TRACE_BUILD_NAME=b10531-cuda \
  -DGGML_LIB_DIR=$bin > /tmp/hooks-gd.log 2>&1 && cmake --build /tmp/hooks-gd -j "$(nproc)" --target ggml-trace-hooks \
  >> /tmp/hooks-gd.log 2>&1 || { tail -30 /tmp/hooks-gd.log; exit 1; }
for lib in $bin/libggml-trace-hooks.so /tmp/hooks-gd/libggml-trace-hooks.so; do
  echo "$lib: $(readelf -d $lib | grep -c STATIC_TLS) STATIC_TLS flag, $(readelf -r $lib | grep -c DTPMOD64) DTPMOD64 relocations"
done
for rep in $(seq "$reps"); do
  for mode in plain initial-exec global-dynamic; do
    pre=()
    case $mode in
      initial-exec) pre=(env LD_PRELOAD=$bin/libggml-trace-hooks.so GGML_TRACE_OUTPUT=/tmp/tls-$mode.ggmltrace) ;;
      global-dynamic) pre=(env LD_PRELOAD=/tmp/hooks-gd/libggml-trace-hooks.so GGML_TRACE_OUTPUT=/tmp/tls-$mode.ggmltrace) ;;
    esac
    rm -f /tmp/tls-$mode.ggmltrace*
    CUDA_VISIBLE_DEVICES=0 "${pre[@]}" $bin/llama-bench -m "$model" -ngl 99 -p 512 -n 128 -r 3 -o csv 2>/dev/null \
      | python3 -c "import csv,sys; [print('bench', '$mode', $rep, r['n_prompt'], r['n_gen'], r['avg_ts'], r['stddev_ts']) for r in csv.DictReader(sys.stdin)]"
  done
done
python3 - "$out/tls.log" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("bench ")]
ts = collections.defaultdict(dict)
for _, mode, rep, p, n, avg, sd in rows:
    ts[("pp" if int(p) else "tg", int(rep))][mode] = float(avg)
for test in ("pp", "tg"):
    for mode in ("initial-exec", "global-dynamic"):
        r = [v[mode] / v["plain"] for (t, _), v in ts.items() if t == test and mode in v and "plain" in v]
        print(f"{test} {mode:15s} mean ratio to plain {statistics.mean(r):.4f} "
              f"(per repetition: {', '.join(f'{x:.3f}' for x in r)})")
PY
