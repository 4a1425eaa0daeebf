#!/usr/bin/env bash
# GPU check of issues 23 and 30, under 8 minutes on one H200: the mission's inference sweep on hardware=h200 with
# the accelerator defaults (Llama-3-8B shapes, random weights / vLLM load_format=dummy, bf16), vllm and hf side by
# side at batch 1 and 64, 128x128 and 1024x1024; 3 timed repeats each. Writes the records and the site under $OUT
# (or ./gpu-check) and prints one line per point. Never run on an accelerator so far (no device was lent).
#   With the device tool: carry .whl (the core's wheels missing from the image, see docs/how-to/gpu-checks.md; ci/gpu/wheels.sh makes them) and run
#   bash ci/gpu/mission_h200.sh
# A node without vLLM records its vllm points as unsupported with the install line (that path is checked too).
source "$(dirname "$0")/env.sh"
python3 -c "import vllm; print('vllm', vllm.__version__)" 2>/dev/null || echo "vllm not importable here: its points end unsupported"
cd "$out"
start=$(date +%s)
timeout 450 python3 -m jobs.sweep -m hardware=h200 cards=1 workload.engine=vllm,hf workload.batch_size=1,64 \
    workload.shape=128x128,1024x1024 workload.warmup=1 workload.repeats=3 workload.noise.target=null \
    sweep.name=gpu-mission 2>&1 | tee "$out/sweep.log" || echo "sweep: exit $? (the records are kept)"
echo "sweep wall: $(( $(date +%s) - start )) s"
[ -f runs/gpu-mission/results.parquet ] || python3 -m analysis.aggregate runs/gpu-mission
python3 - <<'PY'
import pandas as pd
t = pd.read_parquet("runs/gpu-mission/results.parquet")
cols = ["engine", "batch_size", "shape", "status", "throughput_out_tok_s", "ttft_s", "itl_s", "engine_start_s",
        "warmup_s", "vllm_version", "vllm_attention_backend", "graphs", "kv_cache_tokens", "error_message"]
print(t.sort_values(["engine", "shape", "batch_size"])[[c for c in cols if c in t]].to_string(index=False))
PY
ls runs/gpu-mission/site/index.html
