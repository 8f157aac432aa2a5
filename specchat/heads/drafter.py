"""An EAGLE-3 head made ready for drafting: its plain step in fewer, larger operations (a
draft on a CPU costs memory traffic and Python dispatch). Exactness never rests on it:
every draft carries the law this drafter computed (docs/design/heads.md).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from specchat.heads.eagle3 import Eagle3Head
from specchat.heads.int8 import Int8Linear


def _fused(*linears: nn.Linear, int8: bool) -> nn.Module:
    weight = torch.cat([lin.weight.detach() for lin in linears])
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        fused.weight.copy_(weight)
    return Int8Linear(fused) if int8 else fused


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class DrafterCache:
    """K, V [n_kv, capacity, d] and pre-norm outputs [capacity, H], the first ``n`` rows
    filled, at absolute ``positions`` (gaps allowed: positions the head never saw)."""

    def __init__(self, n_kv: int, head_dim: int, hidden: int, dtype: torch.dtype, device, capacity: int = 256) -> None:
        self.k = torch.empty(n_kv, capacity, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.out = torch.empty(capacity, hidden, dtype=dtype, device=device)
        self.positions: list[int] = []

    @property
    def n(self) -> int:
        return len(self.positions)

    def reserve(self, extra: int) -> None:
        need = self.n + extra
        if need <= self.k.shape[1]:
            return
        size = max(need, 2 * self.k.shape[1])
        for name in ("k", "v", "out"):  # the rows are the second-last dimension of each
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:-2], size, old.shape[-1])
            new[..., : self.n, :] = old[..., : self.n, :]
            setattr(self, name, new)

    def truncate(self, position: int) -> None:
        """Drops positions ≥ ``position``."""
        n = self.n
        while n and self.positions[n - 1] >= position:
            n -= 1
        del self.positions[n:]

    @property
    def tail(self) -> torch.Tensor | None:
        """The pre-norm output [1, H] at the last cached position."""
        return self.out[self.n - 1: self.n].clone() if self.positions else None

    @property
    def end(self) -> int:
        return self.positions[-1] + 1 if self.positions else 0


class Drafter:
    """``head`` (left untouched) as a drafting machine: ``fuse``, ``step`` and ``logits`` as in eagle3.py."""

    def __init__(self, head: Eagle3Head, int8: bool = False) -> None:
        c = self.config = head.config
        self.embed = head.embed
        self.dtype = head.norm.dtype
        self.fc = Int8Linear(head.fc) if int8 else head.fc
        self.qkv = _fused(head.q_proj, head.k_proj, head.v_proj, int8=int8)
        self.o_proj = Int8Linear(head.o_proj) if int8 else head.o_proj
        self.gate_up = _fused(head.gate_proj, head.up_proj, int8=int8)
        self.down_proj = Int8Linear(head.down_proj) if int8 else head.down_proj
        self.lm_head = Int8Linear(head.lm_head) if int8 else head.lm_head
        self.norms = {name: getattr(head, name).detach()
                      for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm", "norm")}
        self.split = (c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim)
        self.inv_freq = head.inv_freq
        self.scale = 1.0 / math.sqrt(c.head_dim)
        self._cos = self._sin = torch.empty(0, c.head_dim, dtype=self.dtype, device=self.inv_freq.device)

    def new_cache(self, capacity: int = 256) -> DrafterCache:
        c = self.config
        return DrafterCache(c.num_key_value_heads, c.head_dim, c.hidden_size, self.dtype, self.inv_freq.device, capacity)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features.to(self.dtype))

    def logits(self, prenorm: torch.Tensor) -> torch.Tensor:
        return self.lm_head(_rms(prenorm, self.norms["norm"], self.config.rms_norm_eps))

    def _rope_table(self, top: int) -> None:
        if top < self._cos.shape[0]:
            return
        size = max(top + 1, 2 * self._cos.shape[0], 512)
        angles = torch.arange(size, dtype=torch.float32, device=self.inv_freq.device)[:, None] * self.inv_freq[None]
        self._cos = torch.cat([angles.cos(), angles.cos()], -1).to(self.dtype)
        self._sin = torch.cat([angles.sin(), angles.sin()], -1).to(self.dtype)

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def step(self, cache: DrafterCache, tokens: torch.Tensor, g: torch.Tensor, positions: list[int],
             sees: torch.Tensor | None = None) -> torch.Tensor:
        """The plain step: pairs (tokens [T], g [T, H]) at ``positions`` after what ``cache``
        holds → pre-norm outputs [T, H], appended to the cache. ``sees`` [T, n + T] (bool):
        which cached and new rows each new row attends to (a draft tree's mask); default
        everything cached and the new rows up to itself."""
        c, eps = self.config, self.config.rms_norm_eps
        t, d = len(positions), c.head_dim
        e = self.embed[tokens.reshape(-1)].to(self.dtype)
        x = torch.cat([_rms(e, self.norms["input_layernorm"], eps), _rms(g, self.norms["hidden_norm"], eps)], -1)
        q, k, v = self.qkv(x).split([self.split[0], self.split[1], self.split[1]], -1)
        self._rope_table(positions[-1])
        index = torch.tensor(positions, device=x.device) if t > 1 else None
        cos = self._cos[index] if t > 1 else self._cos[positions[0]: positions[0] + 1]
        sin = self._sin[index] if t > 1 else self._sin[positions[0]: positions[0] + 1]
        q = self._rope(q.view(t, c.num_attention_heads, d).transpose(0, 1), cos, sin)  # [n_q, T, d]
        k = self._rope(k.view(t, c.num_key_value_heads, d).transpose(0, 1), cos, sin)
        cache.reserve(t)
        n = cache.n
        cache.k[:, n: n + t] = k
        cache.v[:, n: n + t] = v.view(t, c.num_key_value_heads, d).transpose(0, 1)
        cache.positions += positions
        total = n + t
        if sees is None and t > 1:  # one row needs no mask
            sees = torch.ones(t, total, dtype=torch.bool, device=x.device).tril(total - t)
        attended = nn.functional.scaled_dot_product_attention(
            q, cache.k[:, :total], cache.v[:, :total], attn_mask=sees, scale=self.scale,
            enable_gqa=c.num_attention_heads != c.num_key_value_heads)
        a = attended.transpose(0, 1).reshape(t, c.num_attention_heads * d)
        residual = _rms(g, self.norms["hidden_norm"], eps) if c.norm_before_residual else g
        h = self.o_proj(a) + residual
        gate, up = self.gate_up(_rms(h, self.norms["post_attention_layernorm"], eps)).chunk(2, -1)
        out = h + self.down_proj(nn.functional.silu(gate) * up)
        cache.out[n: n + t] = out
        return out
