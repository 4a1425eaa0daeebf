"""`python -m jobs.engines.llamacpp.serve --model M.gguf ...`: llama.cpp's server (PyPI's xllamacpp, in this process)
for the serving workload and the offline engine, until SIGTERM (the serving workload's reaper sends it when the
point's worker ends). The only module that imports xllamacpp."""
from __future__ import annotations

import argparse
import signal
import threading

from . import runtime


def start(model: str, *, alias: str, host: str, port: int, parallel: int, ctx_per_slot: int):
    """A started server (xllamacpp.Server; dropping it stops its threads) serving the GGUF `model` from `parallel`
    slots of `ctx_per_slot` tokens each (llama.cpp's n_ctx is the slots' total), with its Prometheus /metrics."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path, p.model_alias, p.hostnames, p.port = model, alias, [host], port
    p.n_parallel, p.n_ctx = parallel, parallel * ctx_per_slot
    p.n_batch = p.n_ubatch = min(512, parallel * ctx_per_slot)
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = runtime.threads()
    p.endpoint_metrics, p.warmup, p.cache_prompt = True, False, False
    return xllamacpp.Server(p)


def build() -> str:
    """llama.cpp's build as xllamacpp reports it, for the record."""
    import xllamacpp

    info = dict(getattr(xllamacpp, "BUILD_INFO", {}) or {})
    return " ".join(f"{k}={v}" for k, v in info.items()) or "unknown"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m jobs.engines.llamacpp.serve")
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--alias", required=True, help="the model name the requests carry")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--parallel", type=int, default=1, help="llama.cpp's slots: requests decoded together")
    ap.add_argument("--ctx-per-slot", type=int, default=4096, help="tokens of context each slot holds")
    args = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = start(args.model, alias=args.alias, host=args.host, port=args.port, parallel=args.parallel,
                           ctx_per_slot=args.ctx_per_slot)
    runtime.wait_ready(args.host, args.port)
    print(f"llama.cpp ({build()}) serving {args.model} on {args.host}:{args.port}", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    del server


if __name__ == "__main__":
    main()
