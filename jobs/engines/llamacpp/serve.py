"""`python -m jobs.engines.llamacpp.serve --model M.gguf ...`: llama.cpp's server for the serving workload, until
SIGTERM (the serving workload's reaper sends it when the point's worker ends)."""
from __future__ import annotations

import argparse
import signal
import threading

from . import runtime


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
    server = runtime.start(args.model, alias=args.alias, host=args.host, port=args.port, parallel=args.parallel,
                           ctx_per_slot=args.ctx_per_slot)
    runtime.wait_ready(args.host, args.port)
    print(f"llama.cpp ({runtime.build()}) serving {args.model} on {args.host}:{args.port}", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    del server


if __name__ == "__main__":
    main()
