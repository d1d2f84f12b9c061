#!/usr/bin/env bash
# Issue #23321 on a real Vulkan driver (NVIDIA's on the H200 host; lavapipe works too), before and
# after the fix. From the repository root:
#   bench/gpu/vulkan_h200.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR MODEL [OUT_DIR]
# Each BUILD_DIR is a llama.cpp Vulkan build (-DGGML_VULKAN=ON; e.g. b10524 and b10531) whose bin/
# holds llama-completion and the hook library built against the same sources
# (scripts/build_hooks.sh SRC BUILD_DIR/bin NAME; docs/vulkan.md). MODEL: a qwen35-style GGUF
# (scripts/make_tiny_model.py --arch qwen35 MODEL). For each build: 20 complete runs (RUNS=...) of
# llama-completion -ngl 99 -nkvo --temp 0, each traced with `ggml-trace record --device-timing`
# and compared with the same build's CPU-only output (-dev none). Writes OUT_DIR/<build>/run-NNN.*
# (trace, output, log), OUT_DIR/<build>/summary.json, and OUT_DIR/summary.json: per build the
# complete, corrupt and crashed runs and the #23321 race's verdicts in corrupt and in clean runs.
# PYTHON: the interpreter with the project's dependencies (default .venv/bin/python or python3).
# VK_DEVICES sets GGML_VK_VISIBLE_DEVICES (default 0: the first Vulkan device). Exit 1 on a crash.
set -euo pipefail
usage="usage: $0 BEFORE_BUILD_DIR AFTER_BUILD_DIR MODEL [OUT_DIR]"
before=${1:?$usage}; after=${2:?$usage}; model=${3:?$usage}
out=${4:-${OUT:-/tmp/vulkan-h200}}
runs=${RUNS:-20}
py=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && py=.venv/bin/python
mkdir -p "$out"
PYTHON=$py . bench/gpu/install_here.sh || exit 1
vulkaninfo --summary 2>/dev/null | grep -E "deviceName|driverName" || true
status=0
for build in "$before" "$after"; do
  name=$(basename "$(realpath "$build")")
  "$py" -m ggml_trace.tracer.vulkan_runs --bin "$build/bin" --model "$model" --runs "$runs" \
    --visible-devices "${VK_DEVICES:-0}" --out "$out/$name" > "$out/$name.json" || status=1
  cat "$out/$name.json"
done
"$py" - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
s = {d.name: {k: v for k, v in json.loads((d / "summary.json").read_text()).items() if k != "runs"}
     for d in sorted(out.iterdir()) if (d / "summary.json").exists()}
(out / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
print(f"summary: {out / 'summary.json'}")
PY
exit $status
