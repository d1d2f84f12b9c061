#!/usr/bin/env bash
# Second round on the builds bench/gpu/virtual_devices_h200.sh left in /tmp/vd: the envelope's red
# cases repeated, unpatched and with ppfix, an empty second Vulkan device of the same GPU, the default
# (internal) allreduce with CUPTI, and #26344's protocol run one process at a time on the 1.6 GB model.
# usage: bench/gpu/virtual_devices_extra.sh OUT
set -uo pipefail
W=/tmp/vd; R=$W/x; BIN=$W/build/bin; S=$W/src/llama.cpp; OUT=$1; mkdir -p $R "$OUT"
export PYTHONPATH=$W/site:$PWD:$S/gguf-py VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
long=$(python3 -c "import random; w='the of and to a in is it you that he was for on are with as I his they be at one have this from'.split(); r=random.Random(1); print(' '.join(r.choice(w) for _ in range(400)))")
g=(--temp 0 --seed 1 --top-k 1 -no-cnv -ngl 99 -b 2048 -ub 512 -sm layer -n 16); ref=$W/results/pp-ref-vulkan0.txt
run() {  # run VARIANT NAME [record options] -- ARGS...
  local v=$1 n=$2; shift 2; local opts=(); while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
  LD_LIBRARY_PATH=$W/$v:$BIN python3 -m ggml_trace.tracer.cli record --no-nvml --hooks $W/$v/libggml-trace-hooks.so \
    --device-timing "${opts[@]}" -o $R/$n.ggmltrace -- timeout 120 stdbuf -o0 $BIN/llama-completion -m $W/big.gguf \
    -p "$long" "${g[@]}" "$@" > $R/$n.txt 2> $R/$n.log
  echo "$n: $(cmp -s $R/$n.txt $ref && echo right || echo WRONG)" | tee -a $R/log.txt
}
LD_LIBRARY_PATH=$W/orig:$BIN $BIN/ggml-rpc-server -H 127.0.0.1 -p 50124 -d CPU > /dev/null 2>&1 & rpc=$!; sleep 2
for v in orig ppfix; do for i in 1 2 3; do
  run $v cuda-ts10-$v-$i -- -dev Vulkan0,CUDA0 -ts 1,0
  run $v rpc-ts10-$v-$i -- --rpc 127.0.0.1:50124 -dev Vulkan0,RPC0 -ts 1,0
  GGML_VK_VISIBLE_DEVICES=0,0 run $v vk00-ts10-$v-$i -- -dev Vulkan0,Vulkan1 -ts 1,0
done; done
for i in 1 2; do run orig vdev-ts10-orig-$i --virtual-devices 1 -- -dev Vulkan0,VDEV0 -ts 1,0; done
kill $rpc
GGML_CUDA_DEVICES=2 LD_LIBRARY_PATH=$W/orig:$BIN python3 -m ggml_trace.tracer.cli record --no-nvml --hooks $W/orig/libggml-trace-hooks.so \
  --cupti --device-timing -o $R/tp2-default-cupti.ggmltrace -- timeout 120 $BIN/llama-completion -m $W/mid.gguf \
  -p "the of and to a in is it you that" -n 16 --temp 0 --seed 1 --top-k 1 -no-cnv -ngl 99 -sm tensor -dev CUDA0,CUDA1 \
  > $R/tp2-default-cupti.txt 2> $R/tp2-default-cupti.log; echo "cupti rc=$?" | tee -a $R/log.txt
mkdir -p $W/seq
for i in $(seq -w 1 40); do
  GGML_CUDA_DEVICES=2 GGML_CUDA_ALLREDUCE=none LD_LIBRARY_PATH=$W/orig:$BIN timeout 120 $BIN/llama-completion -m $W/big.gguf \
    -p "I believe the meaning of life is" -n 48 --temp 0 --seed 1 --top-k 1 -no-cnv -ngl 99 -sm tensor -dev CUDA0,CUDA1 > $W/seq/$i.txt 2>/dev/null
done
echo "one at a time, 1.6 GB model, butterfly: $(md5sum $W/seq/*.txt | awk '{print $1}' | sort | uniq -c | sort -rn | awk '{printf "%s ", $1}') runs per distinct output" | tee -a $R/log.txt
tar cJf "$OUT/x.tar.xz" -C $W x
