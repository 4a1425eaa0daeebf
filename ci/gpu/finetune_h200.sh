#!/usr/bin/env bash
# GPU check of workload=finetune (issue 12), at most ~5 minutes on one H200: LoRA on llama-3-8b shapes (random
# weights, bf16), sequence 512, eager vs sdpa vs flash (flash only where flash-attn is installed), 20 timed steps
# each. Keeps the records under $OUT (or ./gpu-check) and prints the attention speedups.
#   PYTHONPATH=$PWD bash ci/gpu/finetune_h200.sh
set -euo pipefail
out=${OUT:-$PWD/gpu-check}
mkdir -p "$out"
attn=eager,sdpa
python -c "import flash_attn" 2>/dev/null && attn=eager,sdpa,flash || echo "flash-attn not installed: eager and sdpa only"
python -c "import peft" 2>/dev/null || { echo "peft missing: pip install peft"; exit 2; }
cd "$out"
timeout 280 python -m jobs.sweep -m workload=finetune hardware=h200 cards=1 model=llama-3-8b model.init=random \
    precision=bf16 workload.method=lora workload.attention=$attn workload.seq_len=512 workload.batch_size=2 \
    workload.grad_accum=2 workload.warmup_steps=3 workload.repeats=20 workload.noise.target=null \
    sweep.name=gpu-finetune sweep.report=false || echo "sweep: exit $? (the records are kept; a failed point shows in the table)"
python -m analysis.aggregate runs/gpu-finetune
python - <<'PY'
import pandas as pd
t = pd.read_parquet("runs/gpu-finetune/results.parquet")
t = t[t["workload"].eq("finetune")]
cols = ["attention", "status", "train_tok_s", "step_time_s", "mfu", "peak_mem_gb"]
print(t[[c for c in cols if c in t]].to_string(index=False))
ok = t[t["status"].eq("ok")].set_index("attention")["train_tok_s"]
for a, b in (("sdpa", "eager"), ("flash", "eager"), ("flash", "sdpa")):
    if a in ok and b in ok:
        print(f"{a} over {b}: {ok[a] / ok[b]:.3f}x training tokens/s")
PY
