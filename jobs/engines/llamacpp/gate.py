"""The accuracy gate (jobs.accuracy) through llama.cpp's /completion: its `n_probs` gives the top-k logprobs of the
model's own distribution before sampling, and the logprob of the token it picked. Teacher forcing is one request
per prompt position (the prefix, one token, a `logit_bias` that makes that token the prompt's next one: the bias
acts in sampling, the reported logprobs are the model's), then one greedy continuation per prompt."""
from __future__ import annotations

import json
import urllib.request
from typing import Any

from jobs import accuracy

FORCE = 1000.0   # the logit bias that makes the prompt's next token the one picked


def _post(base_url: str, body: dict[str, Any], timeout_s: float, api_key: str | None) -> dict[str, Any]:
    req = urllib.request.Request(f"{base_url}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {api_key}"} if api_key else {})})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def _request(prompt: list[int], n: int, **extra) -> dict[str, Any]:
    return {"prompt": list(prompt), "n_predict": n, "temperature": 0.0, "ignore_eos": True,
            "n_probs": accuracy.TOP_K, "cache_prompt": True, **extra}


def _top(entry: dict[str, Any]) -> dict[int, float]:
    return {int(t["id"]): float(t["logprob"]) for t in entry["top_logprobs"]}


def scored(base_url: str, prompt: list[int], timeout_s: float, api_key: str | None = None) -> accuracy.Scored:
    tops, lps = [], []
    for i in range(1, len(prompt)):
        entry = _post(base_url, _request(prompt[:i], 1, logit_bias=[[prompt[i], FORCE]]), timeout_s,
                      api_key)["completion_probabilities"][0]
        if int(entry["id"]) != prompt[i]:
            raise RuntimeError(f"llama.cpp picked token {entry['id']}, not the forced {prompt[i]}")
        tops.append(_top(entry))
        lps.append(float(entry["logprob"]))
    greedy = _post(base_url, _request(prompt, accuracy.CONTINUATION), timeout_s, api_key)["completion_probabilities"]
    return accuracy.Scored(prompt=list(prompt), prompt_top=tops, prompt_lp=lps,
                           tokens=[int(e["id"]) for e in greedy], top=[_top(e) for e in greedy])


def scorer(base_url: str, name: str, timeout_s: float, api_key: str | None = None):
    """The gate's `score` for llama.cpp's server at `base_url` (it serves one model: `name` is not needed)."""
    def score(prompts: list[list[int]]) -> list[accuracy.Scored]:
        return [scored(base_url, p, timeout_s, api_key) for p in prompts]
    return score
