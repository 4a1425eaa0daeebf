"""Is the load client what is measured? accelsweep's serving client, and its peers, against a fast mock server.

The mock (mock_openai_server.js, Node's cluster module, `--server-workers` processes) streams one token every ITL ms
after TTFT ms and records what it actually did. At each level (streams in flight, closed loop) every client sends the
same load; the table puts, side by side: the TTFT p50 the client reports against the server's own, the TPOT p50
against the server's ITL, throughput against the ideal (streams x tokens / (TTFT + (tokens - 1) x ITL)), and the
client's CPU per streamed token.

    python benchmarks/serving_client.py                          # accelsweep at 16, 64, 256, 512, 1024 streams
    python benchmarks/serving_client.py --peers vllm             # and `vllm bench serve` (ACCELSWEEP_VLLM_PYTHON)
    python benchmarks/serving_client.py --client-processes 1     # accelsweep's client in one process

Client CPU: accelsweep's is its client processes' CPU over the window (what the record's client_cpu_s says); a peer's
is its whole process tree's (start-up included: it cannot be told apart from outside), so it is an upper bound.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUT_TOKENS = 32


def get(url: str, method: str = "GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as r:
        return json.loads(r.read())


class Mock:
    def __init__(self, port: int, ttft_ms: float, itl_ms: float, workers: int):
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(["node", str(ROOT / "benchmarks" / "mock_openai_server.js"), str(port),
                                      str(ttft_ms), str(itl_ms), str(workers)])
        for _ in range(100):
            try:
                get(self.url + "/health")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the mock server did not start")

    def reset(self):
        get(self.url + "/reset", "POST")

    def stats(self) -> dict:
        done = get(self.url + "/stats")
        return {"ttft_ms": statistics.median(d[0] for d in done), "itl_ms": statistics.median(d[1] for d in done),
                "server_requests": len(done)}

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


ACCELSWEEP = """
import json, sys
from jobs.workloads.serving import load, metrics
url, level, requests, tokens, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
spec = load.Load("concurrency", level, requests=requests)
got = load.run(url, "mock", load.prompts(1000, %d, requests), tokens, spec,
               client_processes=int(procs) if procs != "auto" else None)
out = metrics.summary(got.requests, got.window_s, 1, metrics.Slo())
print(json.dumps({"ttft_p50_ms": 1e3 * out["ttft_p50_s"], "tpot_p50_ms": 1e3 * out["tpot_p50_s"],
                  "tok_s": out["output_tok_s"], "ok": out["ok_requests"], "cpu_s": got.client["client_cpu_s"],
                  "tokens": sum(r.output_tokens for r in got.requests), **got.client}))
""" % INPUT_TOKENS


def run_accelsweep(url: str, level: int, requests: int, tokens: int, procs: str) -> dict:
    out = subprocess.run([sys.executable, "-c", ACCELSWEEP, url, str(level), str(requests), str(tokens), procs],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tokenizer_dir(path: Path) -> Path:
    """A word-level tokenizer of 1,000 words, written locally (peers make their prompts with one; no hub here)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{f"w{i}": i + 1 for i in range(999)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>").save_pretrained(path)
    return path


def run_vllm(url: str, level: int, requests: int, tokens: int, tok: Path, python: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [python, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm", "--base-url", url,
               "--model", "mock", "--tokenizer", str(tok), "--dataset-name", "random",
               "--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(tokens),
               "--num-prompts", str(requests), "--max-concurrency", str(level), "--request-rate", "inf",
               "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", d, "--result-filename", "r.json", "--num-warmups", "0"]
        before = cpu_children()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        cpu = cpu_children() - before
        if out.returncode:
            return {"error": (out.stdout + out.stderr)[-600:]}
        r = json.loads((Path(d) / "r.json").read_text())
    return {"ttft_p50_ms": r["median_ttft_ms"], "tpot_p50_ms": r["median_tpot_ms"], "tok_s": r["output_throughput"],
            "ok": r["completed"], "cpu_s": cpu, "tokens": r["total_output_tokens"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="16,64,256,512,1024")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--ttft-ms", type=float, default=20)
    ap.add_argument("--itl-ms", type=float, default=10)
    ap.add_argument("--server-workers", type=int, default=2)
    ap.add_argument("--client-processes", default="auto")
    ap.add_argument("--peers", default="", help="comma-separated: vllm")
    ap.add_argument("--port", type=int, default=18123)
    a = ap.parse_args(argv)
    if shutil.which("node") is None:
        sys.exit("error: the mock server needs Node.js (node) on PATH")
    mock = Mock(a.port, a.ttft_ms, a.itl_ms, a.server_workers)
    peers = [p for p in a.peers.split(",") if p]
    tok = tokenizer_dir(Path(tempfile.mkdtemp()) / "tok") if peers else None
    vllm_python = os.environ.get("ACCELSWEEP_VLLM_PYTHON", "/opt/accelsweep-vllm/bin/python")
    print(f"# mock server: TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, {a.tokens} tokens, {a.server_workers} "
          f"worker processes; {os.cpu_count()} cores; client processes: {a.client_processes}")
    print("| client | streams | TTFT p50 (server's) ms | TPOT p50 (server's ITL) ms | throughput / ideal "
          "| client CPU µs / token | client busy max | loop lag p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for level in (int(x) for x in a.levels.split(",")):
            requests = max(64, a.requests_per_stream * level)
            ideal = level * a.tokens / ((a.ttft_ms + (a.tokens - 1) * a.itl_ms) / 1e3)
            for name in ["accelsweep", *peers]:
                mock.reset()
                if name == "accelsweep":
                    r = run_accelsweep(mock.url, level, requests, a.tokens, a.client_processes)
                else:
                    r = run_vllm(mock.url, level, requests, a.tokens, tok, vllm_python)
                if "error" in r:
                    print(f"| {name} | {level} | failed: {r['error']!r} |")
                    continue
                s = mock.stats()
                busy = f"{r['client_busy_max']:.2f}" if "client_busy_max" in r else "—"
                lag = f"{1e3 * r['client_loop_lag_p99_s']:.2f}" if "client_loop_lag_p99_s" in r else "—"
                print(f"| {name} | {level} | {r['ttft_p50_ms']:.1f} ({s['ttft_ms']:.1f}) | {r['tpot_p50_ms']:.2f} "
                      f"({s['itl_ms']:.2f}) | {r['tok_s'] / ideal:.3f} | {1e6 * r['cpu_s'] / r['tokens']:.1f} "
                      f"| {busy} | {lag} |", flush=True)
    finally:
        mock.stop()


if __name__ == "__main__":
    main()
