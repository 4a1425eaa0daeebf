#!/usr/bin/env bash
# GPU check of issue 24 (serving), under 8 minutes on one H200: vLLM's OpenAI server started in the job with
# Llama-3-8B shapes (random weights, --load-format dummy, bf16), one server start for a load sweep of
# concurrency 1, 16, 64 and request rates 4, 16 (128x128 tokens, 64 requests each), then the goodput search under
# the Interactive SLOs. Writes the records and the site under $OUT (or ./gpu-check) and prints one line per point.
# Never run on an accelerator so far (no device was lent).
#   With the device tool: carry .whl (the core's wheels missing from the image, see docs/how-to/gpu-checks.md; ci/gpu/wheels.sh makes them) and run
#   bash ci/gpu/serving_h200.sh
source "$(dirname "$0")/env.sh"
python3 -c "import vllm; print('vllm', vllm.__version__)"
cd "$out"
start=$(date +%s)
common=(workload=serving hardware=h200 cards=1 model=llama-3-8b model.init=random precision=bf16
        workload.shape=128x128 workload.requests=64 workload.warmup_requests=8 sweep.name=gpu-serving)
timeout 300 python3 -m jobs.sweep -m "${common[@]}" workload.mode=concurrency workload.level=1,16,64 \
    2>&1 | tee "$out/sweep.log" || echo "sweep: exit $? (the records are kept)"
timeout 200 python3 -m jobs.sweep -m "${common[@]}" workload.mode=rate workload.level=4,16 \
    2>&1 | tee -a "$out/sweep.log" || echo "sweep: exit $? (the records are kept)"
timeout 200 python3 -m jobs.sweep -m "${common[@]}" workload.mode=rate workload.search=goodput workload.level=8 \
    workload.slo=interactive workload.search_max_probes=5 2>&1 | tee -a "$out/sweep.log" || echo "search: exit $?"
echo "sweep wall: $(( $(date +%s) - start )) s"
[ -f runs/gpu-serving/results.parquet ] || python3 -m analysis.aggregate runs/gpu-serving
python3 - <<'PY'
import pandas as pd
t = pd.read_parquet("runs/gpu-serving/results.parquet")
cols = ["mode", "level", "search", "status", "output_tok_s", "output_tok_s_per_user", "ttft_p50_s", "ttft_p99_s",
        "tpot_p50_s", "tpot_p99_s", "goodput_req_s", "slo_max_rate_req_s", "server_start_s", "server_reused",
        "server_kv_cache_usage_max", "server_preemptions", "error_message"]
print(t.sort_values(["mode", "level"])[[c for c in cols if c in t]].to_string(index=False))
PY
ls runs/gpu-serving/site/serving.html
