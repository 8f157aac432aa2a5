"""The EAGLE-3 head's drafting step written plainly: a KV cache grown by concatenation,
RoPE computed per call, attention over the expanded K/V. specchat drafted this way
before heads/drafter.py; it stays here as the reference the drafter
(tests/heads/test_drafter.py) and the training-time test
(tests/training/test_head_training.py) are checked against."""

from __future__ import annotations

import math

import torch
from torch import nn

from specchat.heads.eagle3 import Eagle3Head


class HeadCache:
    """The head's KV cache for one sequence: K, V [n_kv, T, d] at absolute positions.
    Positions the head has no target features for are simply absent (attention skips
    them; exactness never depends on a draft's quality). ``truncate(P)`` drops positions
    ≥ P — rollback is bookkeeping, as in the target's cache."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.outputs: torch.Tensor | None = None  # the pre-norm outputs [T, H] of the cached pairs
        self.positions: list[int] = []

    def append(self, k: torch.Tensor, v: torch.Tensor, positions: list[int]) -> None:
        self.k = k if self.k is None else torch.cat([self.k, k], -2)
        self.v = v if self.v is None else torch.cat([self.v, v], -2)
        self.positions += positions

    def truncate(self, position: int) -> None:
        n = len(self.positions)
        while n and self.positions[n - 1] >= position:
            n -= 1
        if n < len(self.positions):
            self.positions = self.positions[:n]
            self.k, self.v = (None, None) if n == 0 else (self.k[..., :n, :], self.v[..., :n, :])
            self.outputs = None if n == 0 else self.outputs[:n]

    @property
    def tail(self) -> torch.Tensor | None:
        """The pre-norm output [1, H] at the last cached position."""
        return None if self.outputs is None else self.outputs[-1:]

    @property
    def end(self) -> int:
        """One past the last position held (0 when empty)."""
        return self.positions[-1] + 1 if self.positions else 0


def step(head: Eagle3Head, cache: HeadCache, tokens: torch.Tensor, g: torch.Tensor,
         positions: list[int]) -> torch.Tensor:
    """Runs pairs (tokens [T], g [T, H]) at ``positions`` after what ``cache`` holds
    (causal among themselves), appends their K/V → pre-norm outputs [T, H]."""
    device = g.device
    pos = torch.tensor(positions, dtype=torch.long, device=device)
    q, k, v = head.qkv(tokens.to(device), g, pos)  # q [n_q, T, d]; k, v [n_kv, T, d]
    cache.append(k, v, positions)
    t, total = len(positions), len(cache.positions)
    # a new row sees everything cached before it and the new rows up to itself
    mask = torch.ones(t, total, dtype=torch.bool, device=device).tril(total - t)
    attended = nn.functional.scaled_dot_product_attention(
        q, head.expand_kv(cache.k), head.expand_kv(cache.v), attn_mask=mask,
        scale=1.0 / math.sqrt(head.config.head_dim))
    out = head.finish(attended, g)
    cache.outputs = out if cache.outputs is None else torch.cat([cache.outputs, out])
    return out
