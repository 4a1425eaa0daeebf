"""The serving workload's config keys, each declared once (type, range, default, help, table column)."""
from __future__ import annotations

from typing import Any

from jobs import engines, taskeval
from jobs.config_schema import Bool, Int, Key, Num, Str

from .disagg import CONNECTORS
from .load import API_KEY_ENV, APIS, ARRIVALS, MODES
from .metrics import SLO_PRESETS

OPTIONS: dict[str, Any] = {
    "name": Str(default="serving", help="the workload (`workload=serving` selects it)"),
    "engine": Str(default="vllm", choices=tuple(engines.SERVED), column=True, help=(
        "the server launched in the job (its launch spec: jobs/engines/<name>/): "
        + " \\| ".join(f"`{n}`: {s.serve.summary} ({', '.join(s.serve.devices)}; {'/'.join(s.serve.precisions)})"
                        + (f"; **never ran here**: {s.never_ran}" if s.never_ran else "")
                        for n, s in engines.SERVED.items()))),
    "endpoint": Str(null=True, default=None, help=(
        "URL of a server that is already running (e.g. `http://inference.site:8000`): measured as it is, nothing "
        "is launched; `engine`, `cards` and the engine blocks then only label the point; a server that asks for a "
        f"key (vLLM's `--api-key`) gets the environment variable `{API_KEY_ENV}` as a Bearer token (credentials in "
        "the URL are refused: it is recorded and published)"),
        secret=f"give the URL without them; a server that asks for a key (vLLM's --api-key) gets it from the "
               f"environment variable {API_KEY_ENV} of the sweep, sent as `Authorization: Bearer <key>`"),
    "api": Str(null=True, default=None, choices=tuple(APIS), help=(
        "the endpoint's API: `completions` (/v1/completions: token ids or text, exactly `output_tokens`) \\| "
        "`chat` (/v1/chat/completions: each prompt as one user message of text, at most `output_tokens`: a "
        "hosted API such as SambaCloud's, or a launched server whose checkpoint has a chat template; a "
        "conversation's turns as messages); `null`: endpoint-only hardware's `endpoint.api`, else `completions`")),
    "served_name": Str(null=True, default=None, help=(
        "the model name the requests carry; `null`: the model's name (with `endpoint`, give the name it serves)")),
    "mode": Str(default="concurrency", choices=MODES, column=True, help=(
        "`concurrency`: closed loop, `level` requests (conversations, with `turns`) in flight at all times \\| "
        "`rate`: open loop, `level` requests (conversations) per second whatever the server does \\| `trace`: "
        "open loop at the times of `trace`")),
    "level": Num(min=0.001, default=1, column=True, help=(
        "requests in flight (`mode=concurrency`, a whole number) or requests/s (`mode=rate`); with `turns`, "
        "conversations; not used by `mode=trace`")),
    "arrival": Str(default="poisson", choices=ARRIVALS, help="`mode=rate`: Poisson (seeded by `seed`) or constant gaps"),
    "requests": Int(min=1, default=32, column=True, help=(
        "measured requests of the point (with `turns`, every turn counts; `mode=trace`: the trace's first lines)")),
    "turns": Int(min=1, default=1, column=True, help=(
        "requests per conversation: each turn sends the conversation so far (every prompt and answer before it, "
        "as token ids or chat messages) and a new prompt of `input_tokens`, so a prefix cache can reuse it")),
    "think_time_s": Num(min=0, default=0, help="seconds between an answer and the next turn of its conversation"),
    "prefix_tokens": Int(min=0, default=0, column=True, help=(
        "a shared prefix (a system prompt) of this many random token ids before a conversation's first prompt; "
        "0: none")),
    "prefixes": Int(min=1, default=1, help="distinct shared prefixes, drawn in turn by the conversations using one"),
    "prefix_share": Num(min=0, max=1, default=1, help="share of the conversations that start with a shared prefix"),
    "trace": Str(null=True, default=None, column=True, help=(
        "`mode=trace`: a JSONL trace in Mooncake's format (`timestamp` ms, `input_length`, `output_length`, "
        "`hash_ids`; jobs/workloads/serving/trace.py), replayed at its times; `mooncake_small` names the small "
        "synthetic one shipped in jobs/workloads/serving/traces/")),
    "trace_speedup": Num(min=0.0001, default=1, column=True, help="`mode=trace`: the trace's times divided by this"),
    "trace_block_tokens": Int(min=1, null=True, default=None, help=(
        "`mode=trace`: tokens per `hash_ids` block, as the trace was made; `null`: 512 (Mooncake's), or a shipped "
        "trace's own (16 for `mooncake_small`)")),
    "topology": Str(default="aggregated", choices=("aggregated", "disaggregated"), column=True, help=(
        "`aggregated`: one server does prefill and decode \\| `disaggregated`: `disagg.prefill` + `disagg.decode` "
        "vLLM instances on an equal share of the cards each, their KV caches joined by `disagg.connector`, and a "
        "router in the job that sends each request to a prefill instance (one token) and then to a decode "
        "instance (jobs/workloads/serving/disagg.py); TTFT is split into the prefill and the handoff after it")),
    "disagg": {
        "prefill": Int(min=1, default=1, column="prefill_instances", help="`topology=disaggregated`: prefill instances (the P of xPyD)"),
        "decode": Int(min=1, default=1, column="decode_instances", help="`topology=disaggregated`: decode instances (the D of xPyD)"),
        "connector": Str(default="example", choices=tuple(CONNECTORS), column="kv_connector", help=(
            "the KV connector: " + " \\| ".join(f"`{k}`: {c.note}" for k, c in CONNECTORS.items()))),
        "kv_dir": Str(null=True, default=None, identity=False, help=(
            "`connector=example`: the directory the instances store and load KV in (every instance must see it); "
            "`null`: a folder under the sweep directory's `kv/`, removed with the instances")),
    },
    "stop_at_saturation": Bool(default=False, identity=False, help=(
        "in a load sweep, skip a series' higher levels once a level is `saturated` (its throughput rose less than "
        "5 % over the level below while its p50 TTFT grew): they would measure the queue, not the server")),
    "warmup_requests": Int(min=0, default=4, help="requests sent first, to completion, and left out of every figure"),
    "input_tokens": Int(min=1, default=32, help="prompt length in tokens, exactly (random token ids)"),
    "output_tokens": Int(min=1, default=32, help="generated length, exactly (`ignore_eos` and `min_tokens`)"),
    "shape": Str(null=True, default=None, column=True,
                 help="`\"<in>x<out>\"`, which overrides the two lengths so they sweep as pairs"),
    "dataset": Str(null=True, default=None, column=True, help=(
        "a local JSONL file of prompts (`prompt` text, `prompt_token_ids`, or ShareGPT `conversations`; optional "
        "`output_tokens` per line; jobs/workloads/serving/dataset.py) in place of random token ids of "
        "`input_tokens`; text needs a model with a tokenizer (`model.init=pretrained`)")),
    "slo": Str(default="server", choices=tuple(SLO_PRESETS), column=True, help=(
        "the latency limits of goodput: `server` = MLPerf Inference's Llama-2-70B Server scenario (p99 TTFT 2 s, "
        "p99 TPOT 200 ms), `interactive` = its Interactive scenario (450 ms, 40 ms); `slo_ttft_s` and "
        "`slo_tpot_s` override one limit")),
    "slo_ttft_s": Num(min=0, null=True, default=None, help="`null`: the preset's TTFT limit (s)"),
    "slo_tpot_s": Num(min=0, null=True, default=None, help="`null`: the preset's TPOT limit (s)"),
    "search": Str(null=True, default=None, choices=("goodput",), help=(
        "`goodput`: find the highest request rate (open loop) whose p99 TTFT and TPOT meet the SLOs, doubling "
        "from `level` then bisecting to `search_resolution`; each probed rate is in the record")),
    "search_resolution": Num(min=0.0001, max=1, default=0.1, help=(
        "the search stops when the bracket's width is at most this share of its lower end")),
    "search_max_probes": Int(min=2, default=10, help="the search's largest number of probed rates"),
    "startup_timeout_s": Num(min=1, default=900, identity=False, help=(
        "seconds the server may take to answer its health check; the record then names its log's last lines")),
    "client_processes": Int(min=1, null=True, default=None, identity=False, help=(
        "processes of the load client (one event loop each, started together); `null`: one per core the job may use, "
        "at most one per stream. A client process busy for 90 % of the window marks the point `client_bound`")),
    "request_timeout_s": Num(min=1, default=600, identity=False, help="a request's limit; past it, it counts failed"),
    "server_args": Key("list", default=[], help=(
        "extra arguments for the server's command line, e.g. `[--max-num-batched-tokens,512]` (numbers as text)")),
    "server_python": Str(null=True, default=None, identity=False, help=(
        "the Python that runs a python-launched server (vllm, sglang, llamacpp); `null`: the worker's")),
    "downstream": taskeval.OPTIONS,   # task accuracy through the point's server, after the load
    **{name: dict(spec.serve_options) for name, spec in engines.SERVED.items() if spec.serve_options},
}
