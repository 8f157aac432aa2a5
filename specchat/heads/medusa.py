"""Medusa-1 heads (Cai et al. 2024) in torch: head i reads the target's final hidden state
h_P and predicts the token at P + 2 + i through residual blocks x ← x + SiLU(W x + b) and a
linear map; ``token_map`` names each output row's target id (docs/design/heads.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class MedusaConfig:
    """``vocab_size`` is the target's; ``draft_vocab_size`` the heads' rows (≤ it)."""

    num_heads: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    extra: dict = field(default_factory=dict, compare=False)  # other keys, kept on save

    def to_json(self) -> dict:
        """FasterDecoding's key names (``medusa_num_heads``, ``medusa_num_layers``), which
        vLLM's MedusaConfig maps onto its own. No other key may contain both "num" and
        "heads" (or "layers"): vLLM's loader would take it for the head (layer) count."""
        config = {k: v for k, v in self.extra.items() if not ("num" in k and ("heads" in k or "layers" in k))}
        config.update({
            "architectures": ["MedusaModel"], "model_type": "medusa",
            "medusa_num_heads": self.num_heads, "medusa_num_layers": self.num_layers,
            "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
            "medusa_fc_bias": True,  # vLLM builds the blocks without bias unless told
            "torch_dtype": "bfloat16",
        })
        if self.draft_vocab_size != self.vocab_size:
            config["truncated_vocab_size"] = self.draft_vocab_size
        return config


class MedusaHead(nn.Module):
    """All heads of one checkpoint. ``blocks[i][j]`` is head i's j-th residual linear map
    [H, H] (with bias); ``lm_heads[i]`` its [V_draft, H] output map."""

    kind = "medusa"

    def __init__(self, config: MedusaConfig) -> None:
        super().__init__()
        c = self.config = config
        self.blocks = nn.ModuleList(
            nn.ModuleList(nn.Linear(c.hidden_size, c.hidden_size, bias=True) for _ in range(c.num_layers))
            for _ in range(c.num_heads))
        self.lm_heads = nn.ModuleList(
            nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False) for _ in range(c.num_heads))
        self.register_buffer("token_map", torch.arange(c.draft_vocab_size, dtype=torch.long))

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    def head_logits(self, hidden: torch.Tensor, i: int) -> torch.Tensor:
        """Head i on final hidden states [..., H] → logits [..., V_draft] for the token
        i + 2 positions after each."""
        x = hidden.to(self.lm_heads[i].weight.dtype)
        for layer in self.blocks[i]:
            x = x + nn.functional.silu(layer(x))
        return self.lm_heads[i](x)

    def forward(self, hidden: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """The first ``num_heads`` heads (all by default) → logits [num_heads, ..., V_draft]."""
        n = self.config.num_heads if num_heads is None else num_heads
        return torch.stack([self.head_logits(hidden, i) for i in range(n)])
