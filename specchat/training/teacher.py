"""Teacher-forced features and soft labels: one target forward over a sample gives the head's
three layers' inputs and the target's law after every position, kept as its ``top`` likeliest
tokens (the loss is against the target's law, not the token the reply took: q close to p at
any temperature). Features in bfloat16 (1e5 positions of three 576-wide layers: ~330 MB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Taught:
    """One sample: ``ids`` [T]; ``features`` [T, F] bf16; ``top_ids`` [T, K] int32 and
    ``top_p`` [T, K] float16 — the target's next-token law after each position;
    ``reply_start``: positions before it are the prompt (not trained on)."""

    ids: torch.Tensor
    features: torch.Tensor
    top_ids: torch.Tensor
    top_p: torch.Tensor
    reply_start: int


def top_law(logits: torch.Tensor | np.ndarray, top: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, V] → (ids [T, K] int32, probabilities [T, K] float16): each row's ``top``
    most likely tokens under its law at temperature 1."""
    logits = torch.as_tensor(logits).float()
    values, ids = logits.topk(top, dim=-1)
    p = torch.exp(values - torch.logsumexp(logits, dim=-1, keepdim=True))
    return ids.to(torch.int32), p.to(torch.float16)


def teach(backend, ids: list[int], reply_start: int, layer_ids: tuple[int, ...] | None = None, top: int = 32) -> Taught:
    """One teacher-forced pass; the features are ``layer_ids``' inputs (EAGLE-3), or with
    None the final hidden states [T, H] (Medusa)."""
    backend.reset()
    if layer_ids is None:
        backend.request_final_hidden()
    else:
        backend.request_features(layer_ids)
    with torch.no_grad():
        logits = backend.forward(ids, num_logits=len(ids))  # [T, V]
    if layer_ids is None:
        rows, start = backend.last_final_hidden, backend.final_hidden_start
    else:
        rows, start = backend.last_features, backend.features_start
    assert rows is not None and rows.shape[0] == len(ids) and start == 0
    top_ids, top_p = top_law(logits, min(top, logits.shape[-1]))
    return Taught(torch.tensor(ids, dtype=torch.long), rows.cpu().to(torch.bfloat16), top_ids, top_p, reply_start)
