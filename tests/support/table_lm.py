"""A table language model behind the engine's Backend seam: the logits of the next token
are a fixed random row chosen by the last two ids (an order-2 Markov chain). Float64, a
vocabulary of 16 (or padded/cut for drafts), no transformers in the loop — a forward is
a table lookup, so statistical tests can afford thousands of multi-step samples, and the
exact joint distribution of any continuation is enumerable."""

from __future__ import annotations

import torch

from specchat.engine.backends import Backend
from specchat.engine.sampling import SamplingParams, warp

VOCAB = 16


def random_table(seed: int, rows: int = VOCAB, width: int = VOCAB, scale: float = 2.5) -> torch.Tensor:
    """[rows, rows, width] logits, one row per (second-to-last, last) id."""
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(rows, rows, width, generator=gen, dtype=torch.float64)


def noisy(table: torch.Tensor, seed: int, noise: float, width: int | None = None) -> torch.Tensor:
    """A draft's table: the target's plus noise, cut or padded (with random rows) to ``width``."""
    gen = torch.Generator().manual_seed(seed)
    out = table + noise * torch.randn(table.shape, generator=gen, dtype=torch.float64)
    width = width or table.shape[-1]
    if width < out.shape[-1]:
        return out[..., :width].contiguous()
    pad = torch.randn(*out.shape[:-1], width - out.shape[-1], generator=gen, dtype=torch.float64)
    return torch.cat([out, pad], dim=-1)


class TableLM(Backend):
    """Stateless under the hood (logits depend only on the ids), with the id bookkeeping
    of a cached backend."""

    name = "table"

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table
        self.vocab_size = table.shape[-1]
        self.eos_token_ids = frozenset()
        self._ids: list[int] = []

    @property
    def ids(self) -> list[int]:
        return self._ids

    def logits_after(self, context: list[int]) -> torch.Tensor:
        """[V] logits of the next token after ``context`` (at least one id)."""
        a = context[-2] if len(context) > 1 else context[-1]
        return self.table[a, context[-1]]

    def _logits(self, seq: list[int], num_logits: int) -> torch.Tensor:
        return torch.stack([self.logits_after(seq[: len(seq) - num_logits + 1 + i]) for i in range(num_logits)])

    def forward(self, ids, extra=None, num_logits=1):
        seq = list(ids) + (extra.tolist() if extra is not None else [])
        self._ids = seq
        return self._logits(seq, num_logits)

    def extend(self, tokens, num_logits=1):
        self._ids = self._ids + tokens.tolist()
        return self._logits(self._ids, num_logits)

    def reset(self):
        self._ids = []


def next_laws(lm: TableLM, prompt: list[int], params: SamplingParams):
    """For power.tree_chi_square: the exact next-token law after prompt + each prefix."""

    def laws(prefixes):
        if not prefixes:
            return []
        logits = torch.stack([lm.logits_after(prompt + list(prefix)) for prefix in prefixes])
        return warp(logits, params).tolist()

    return laws


def exact_joint(lm: TableLM, prompt: list[int], length: int, params: SamplingParams) -> dict[tuple, float]:
    """P(x_1..x_length | prompt) under plain sampling with ``params``, for every sequence
    (vocab16.exact_joint's enumeration, on the table)."""
    probs = {(): 1.0}
    for _ in range(length):
        prefixes = list(probs)
        p = warp(torch.stack([lm.logits_after(prompt + list(pre)) for pre in prefixes]), params)
        nxt = {}
        for row, pre in enumerate(prefixes):
            for tok, pt in enumerate(p[row].tolist()):
                if pt > 0:
                    nxt[pre + (tok,)] = probs[pre] * pt
        probs = nxt
    return probs

