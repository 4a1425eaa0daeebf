"""The accuracy gate (jobs.accuracy) through vLLM's server: the fixed prompts sent to its OpenAI /v1/completions
as token ids, with vLLM's `prompt_logprobs` (the teacher-forced logprobs of the prompt) and `logprobs` of a greedy
continuation, token ids instead of text (`return_tokens_as_token_ids`), so that a server started without a
tokenizer answers too. (OpenAI's own `echo` with `logprobs` needs a tokenizer, which a random-weight model has not.)
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any

from jobs import accuracy

_ID = "token_id:"     # how vLLM names a token with return_tokens_as_token_ids


def request(name: str, prompt: list[int]) -> dict[str, Any]:
    """The completion request for one of the gate's prompts: greedy, EOS ignored, top-k logprobs of both parts."""
    return {"model": name, "prompt": list(prompt), "max_tokens": accuracy.CONTINUATION,
            "min_tokens": accuracy.CONTINUATION, "ignore_eos": True, "temperature": 0.0, "logprobs": accuracy.TOP_K,
            "prompt_logprobs": accuracy.TOP_K, "return_tokens_as_token_ids": True}


def _token(name: str | int) -> int:
    text = str(name)
    return int(text.removeprefix(_ID))


def _top(position: dict[int, float]) -> dict[int, float]:
    return dict(sorted(position.items(), key=lambda x: -x[1])[:accuracy.TOP_K])


def scored(prompt: list[int], choice: dict[str, Any]) -> accuracy.Scored:
    """One completion choice as the gate's Scored: `prompt_logprobs` is a list (None first) of {token id:
    {logprob, rank, decoded_token}}; `logprobs` OpenAI's tokens and top_logprobs, tokens named token_id:<id>."""
    positions = [{_token(t): float(v["logprob"]) for t, v in d.items()} for d in choice["prompt_logprobs"][1:]]
    lp = choice["logprobs"]
    return accuracy.Scored(prompt=list(prompt), prompt_top=[_top(d) for d in positions],
                           prompt_lp=[d[t] for d, t in zip(positions, prompt[1:], strict=True)],
                           tokens=[_token(t) for t in lp["tokens"]],
                           top=[_top({_token(t): float(v) for t, v in d.items()}) for d in lp["top_logprobs"]])


def scorer(base_url: str, name: str, timeout_s: float, api_key: str | None = None):
    """The gate's `score` for a server at `base_url` serving model `name`."""
    def score(prompts: list[list[int]]) -> list[accuracy.Scored]:
        out = []
        for prompt in prompts:
            req = urllib.request.Request(f"{base_url}/v1/completions", data=json.dumps(request(name, prompt)).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **({"Authorization": f"Bearer {api_key}"} if api_key else {})})
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                out.append(scored(prompt, json.loads(resp.read())["choices"][0]))
        return out
    return score

