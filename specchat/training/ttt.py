"""EAGLE-3's training-time test: the head trained on its own drafting, S steps deep, step j
weighted 0.8^j (docs/design/training.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specchat.heads.eagle3 import Eagle3Head

STEP_WEIGHT = 0.8


@dataclass
class Batch:
    """B padded samples of length T: ``ids`` [B, T]; ``features`` [B, T, F]; ``top_ids``
    [B, T, K] draft-vocabulary indices (−1: outside it); ``top_p`` [B, T, K]; ``loss_from``
    [B]: the first position whose law is trained on (the reply's start − 1); ``length`` [B]."""

    ids: torch.Tensor
    features: torch.Tensor
    top_ids: torch.Tensor
    top_p: torch.Tensor
    loss_from: torch.Tensor
    length: torch.Tensor


def ttt_forward(head: Eagle3Head, batch: Batch, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """→ (loss, correct [steps, B, T] bool: the head's argmax is the target's at that step
    and row; rows without a label are False)."""
    c = head.config
    b, t = batch.ids.shape
    rows = torch.arange(t)
    scale = 1.0 / math.sqrt(c.head_dim)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    g = head.fuse(batch.features)  # [B, T, H]
    keys, values = [], []
    total = torch.zeros(())
    correct = torch.zeros(steps, b, t, dtype=torch.bool)
    for j in range(steps):
        shifted = torch.zeros_like(batch.ids)
        shifted[:, : t - 1 - j] = batch.ids[:, 1 + j:]  # token i+1+j at row i
        q, k, v = head.qkv(shifted, g, rows + j)  # q [B, n_q, T, d]; k, v [B, n_kv, T, d]
        keys.append(head.expand_kv(k))
        values.append(head.expand_kv(v))
        scores = (q @ keys[0].transpose(-1, -2)) * scale  # [B, n_q, T, T]
        scores = scores.masked_fill(~causal, float("-inf"))
        diagonal = [(q * keys[s]).sum(-1, keepdim=True) * scale for s in range(1, j + 1)]  # [B, n_q, T, 1] each
        weights = torch.softmax(torch.cat([scores, *diagonal], -1), -1)
        attended = weights[..., :t] @ values[0]
        for s in range(1, j + 1):
            attended = attended + weights[..., t + s - 1: t + s] * values[s]
        g = head.finish(attended, g)  # this step's output is the next step's g
        logits = head.logits(g)  # [B, T, V_draft]
        # labels: the target's law after position i+1+j
        label_ids = torch.full_like(batch.top_ids, -1)
        label_p = torch.zeros_like(batch.top_p)
        label_ids[:, : t - 1 - j] = batch.top_ids[:, 1 + j:]
        label_p[:, : t - 1 - j] = batch.top_p[:, 1 + j:]
        position = rows[None] + 1 + j
        valid = (position < batch.length[:, None]) & (position >= batch.loss_from[:, None])  # [B, T]
        inside = label_ids >= 0
        p = torch.where(inside, label_p.float(), torch.zeros(()))
        mass = p.sum(-1, keepdim=True)
        valid = valid & (mass[..., 0] > 0)
        p = p / mass.clamp_min(1e-12)
        log_q = torch.log_softmax(logits.float(), -1).gather(-1, label_ids.clamp_min(0))  # [B, T, K]
        ce = -(p * log_q).sum(-1)  # [B, T]
        count = valid.sum().clamp_min(1)
        total = total + STEP_WEIGHT ** j * (ce * valid).sum() / count
        best_label = label_ids.gather(-1, label_p.float().argmax(-1, keepdim=True))[..., 0]
        correct[j] = valid & (logits.argmax(-1) == best_label)
    return total, correct


def chain_lengths(correct: torch.Tensor) -> torch.Tensor:
    """[steps, B, T] → [B, T] consecutive correct steps from step 0."""
    return torch.cumprod(correct.int(), 0).sum(0)


def collate(samples: list, draft_index: torch.Tensor, max_len: int) -> Batch:
    """Taught samples (teacher.py) → a padded batch; ``draft_index`` [V] maps a target id
    to its draft-vocabulary index, −1 outside it."""
    t = min(max_len, max(len(s.ids) for s in samples))
    b, f, k = len(samples), samples[0].features.shape[1], samples[0].top_ids.shape[1]
    ids = torch.zeros(b, t, dtype=torch.long)
    features = torch.zeros(b, t, f, dtype=torch.float32)
    top_ids = torch.full((b, t, k), -1, dtype=torch.long)
    top_p = torch.zeros(b, t, k, dtype=torch.float32)
    loss_from, length = torch.zeros(b, dtype=torch.long), torch.zeros(b, dtype=torch.long)
    for row, s in enumerate(samples):
        n = min(t, len(s.ids))
        ids[row, :n] = s.ids[:n]
        features[row, :n] = s.features[:n].float()
        top_ids[row, :n] = draft_index[s.top_ids[:n].long()]
        top_p[row, :n] = s.top_p[:n].float()
        loss_from[row], length[row] = max(0, s.reply_start - 1), n
    return Batch(ids, features, top_ids, top_p, loss_from, length)
