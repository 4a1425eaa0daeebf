"""Perplexity and KL divergence on held-out sequences, sharded over the point's ranks.

perplexity = exp(total negative log-likelihood / predicted tokens) over every window of the held-out text;
kl = mean over predicted tokens of KL(p_reference || p_model), the reference being the unquantized model's
next-token distribution. With cards > 1 every rank scores its share of the windows and the sums are combined.
"""
from __future__ import annotations

import math
import time


class Evaluator:
    def __init__(self, model, seqs, batch_size: int, ctx):
        self.model, self.batch, self.ctx = model, batch_size, ctx
        self.seqs = seqs[ctx.rank::ctx.world_size]
        self.tokens = int(seqs[:, 1:].numel())   # predicted tokens over all ranks
        self.reference = [self._logprobs(b) for b in self._batches()]   # unquantized model's distributions
        # the unquantized model's score comes from the same pass (its KL against itself is 0): scored once
        (nll,) = self._sum((sum(self._nll(ids, lp) for ids, lp in zip(self._batches(), self.reference)),))
        self.unquantized = {"perplexity": math.exp(nll / self.tokens), "kl": 0.0}

    def _batches(self):
        return [self.seqs[i: i + self.batch] for i in range(0, len(self.seqs), self.batch)]

    def _logprobs(self, ids):
        import torch

        with torch.inference_mode():
            return torch.log_softmax(self.model(input_ids=ids).logits[:, :-1].float(), dim=-1)

    def _sum(self, values: tuple[float, ...]) -> tuple[float, ...]:
        """Element-wise sum over ranks, known to every rank."""
        gathered = self.ctx.gather(values)
        total = tuple(map(sum, zip(*gathered))) if gathered is not None else None
        return self.ctx.broadcast(total)

    @staticmethod
    def _nll(ids, lp) -> float:
        """Negative log-likelihood of the windows `ids` under their next-token log-probabilities `lp`."""
        return -float(lp.gather(-1, ids[:, 1:].unsqueeze(-1)).sum())

    def score(self) -> dict[str, float]:
        """The current model's perplexity and KL against the reference."""
        import torch

        nll = kl = 0.0
        for ids, ref in zip(self._batches(), self.reference):
            lp = self._logprobs(ids)
            nll += self._nll(ids, lp)
            kl += float(torch.nn.functional.kl_div(lp, ref, log_target=True, reduction="sum"))
        nll, kl = self._sum((nll, kl))
        return {"perplexity": math.exp(nll / self.tokens), "kl": kl / self.tokens}

    def calibrate(self, model) -> None:
        """Every held-out batch of this rank through `model` (a quantizer measuring activation ranges)."""
        import torch

        with torch.inference_mode():
            for ids in self._batches():
                model(input_ids=ids)

    def time_forward(self, batch) -> float:
        """Seconds for one forward pass over `batch` on this rank (all ranks start together)."""
        import torch

        self.ctx.barrier()
        t0 = time.perf_counter()
        with torch.inference_mode():
            self.model(input_ids=batch)
        return time.perf_counter() - t0
