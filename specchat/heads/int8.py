"""A head's linear layers as int8 weights with one bfloat16 scale per output row, for
drafting on a CPU.

Drafting one token reads every weight of the head once (~26 MB in float32 for the
embedded SmolLM2's head), so on a CPU a draft costs memory traffic, not arithmetic.
torch's ``_weight_int8pack_mm`` reads a quarter of the bytes, and is that much faster
(docs/benchmarks/why-the-numbers.md).

Exactness does not depend on it: each draft carries the law it was drawn from, computed
by this same quantised head, and the rejection sampler verifies against that law.
"""

from __future__ import annotations

import torch
from torch import nn

AVAILABLE = hasattr(torch, "_weight_int8pack_mm")


class Int8Linear(nn.Module):
    """``y = x Wᵀ`` with W stored as int8 rows times a bf16 scale each (symmetric, per row)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = (w.abs().amax(1) / 127.0).clamp_min(1e-12)  # [N]
        self.register_buffer("weight", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch._weight_int8pack_mm(rows, self.weight, self.scale)
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
