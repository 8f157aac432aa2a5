"""A head's linear layers as int8 weights with one bfloat16 scale per output row: on a CPU a
draft costs reading every weight (~26 MB in float32 for the embedded SmolLM2's head), and
``_weight_int8pack_mm`` reads a quarter of the bytes. Each draft carries the law this
quantised head computed, so exactness does not depend on it.
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
