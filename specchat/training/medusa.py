"""``train-head --kind medusa``: after the EAGLE-3 pipeline's corpus, distillation and draft
vocabulary, teach (final hidden states and next-token laws) and train + export (head i at
position t learns token t + 2 + i, weighted 0.8^i). Design notes: docs/design/training.md
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from specchat.heads.medusa import MedusaConfig, MedusaHead, save_medusa
from specchat.training.teacher import Taught, teach
from specchat.training.train import History, TrainConfig, draft_index, run_epochs
from specchat.training.ttt import chain_lengths

DECAY = 0.8  # head i's loss weight is DECAY ** i (Medusa-1)


@dataclass
class Positions:
    """Every trained position of some samples: h [N, H]; for head i, the labels' draft
    indices ``ids[i]`` [N, K] (-1: not in the draft vocabulary), their probabilities
    ``p[i]`` [N, K] and whether the position has a label at all ``valid[i]`` [N]."""

    h: torch.Tensor
    ids: list[torch.Tensor]
    p: list[torch.Tensor]
    valid: list[torch.Tensor]


def positions(samples: list[Taught], num_heads: int, draft_index: torch.Tensor) -> Positions:
    if not samples:
        none = torch.zeros(0, 1, dtype=torch.long)
        return Positions(torch.zeros(0, 1), [none] * num_heads, [none.float()] * num_heads,
                         [torch.zeros(0, dtype=torch.bool)] * num_heads)
    hs, ids, ps, valid = [], [[] for _ in range(num_heads)], [[] for _ in range(num_heads)], [[] for _ in range(num_heads)]
    for s in samples:
        t = torch.arange(max(0, s.reply_start - 1), s.ids.numel() - 1)  # h_t predicts a reply token
        hs.append(s.features[t])
        for i in range(num_heads):
            row = (t + 1 + i).clamp_max(s.ids.numel() - 1)  # the target's law at t + 1 + i: token t + 2 + i
            ids[i].append(draft_index[s.top_ids[row].long()])
            ps[i].append(s.top_p[row].float())
            valid[i].append(t + 2 + i < s.ids.numel())  # that token exists in the reply
    return Positions(torch.cat(hs), *([torch.cat(x) for x in per_head] for per_head in (ids, ps, valid)))


def loss_and_hits(head: MedusaHead, data: Positions, rows: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The weighted soft-label cross-entropy over ``rows``, and per head whether its
    greedy draft is the target's greedy token there ([len(rows)] bool)."""
    h = data.h[rows].float()
    total, hits = 0.0, []
    for i in range(head.num_heads):
        log_q = head.head_logits(h, i).log_softmax(-1)  # [n, V_draft]
        ids, p, valid = data.ids[i][rows], data.p[i][rows], data.valid[i][rows]
        known = ids >= 0
        picked = log_q.gather(-1, ids.clamp_min(0)) * known  # log q of each label id in the vocabulary
        ce = -(p * picked).sum(-1) / p.sum(-1).clamp_min(1e-6)
        total = total + DECAY ** i * (ce * valid).sum() / valid.sum().clamp_min(1)
        hits.append((log_q.argmax(-1) == ids[:, 0]) & valid)
    return total, hits


def evaluate(head: MedusaHead, data: Positions, gammas=(1, 2, 3, 4)) -> dict:
    """Held-out acceptance at temperature 0: a chain of drafts is kept while each head's
    greedy draft is the target's greedy token (the first label)."""
    with torch.no_grad():
        rows = torch.arange(data.h.shape[0])
        _, hits = loss_and_hits(head, data, rows) if len(rows) else (None, [])
    if not hits:
        return {"positions": 0}
    chain = chain_lengths(torch.stack(hits)).float()  # [N] heads in a row whose draft is the target's
    lengths = {f"mean_acceptance_length@{g}": round(1.0 + float(chain.clamp_max(g).mean()), 4) for g in gammas}
    return {"positions": len(rows), **lengths}


def new_head(num_heads: int, hidden: int, vocab: int, draft_ids: torch.Tensor, embed: torch.Tensor | None) -> MedusaHead:
    head = MedusaHead(MedusaConfig(num_heads=num_heads, num_layers=1, hidden_size=hidden, vocab_size=vocab,
                                   draft_vocab_size=int(draft_ids.numel())))
    with torch.no_grad():
        head.token_map.copy_(draft_ids)
        for blocks, lm in zip(head.blocks, head.lm_heads):
            for layer in blocks:
                layer.weight.zero_()
                layer.bias.zero_()
            if embed is not None:
                lm.weight.copy_(embed[draft_ids])
    return head


def train(head: MedusaHead, train_set: Positions, held_out: Positions, cfg: TrainConfig, bar: Callable,
          history: History, on_epoch: Callable[[History], None]) -> History:
    n = train_set.h.shape[0]

    def shuffled(rng: random.Random) -> Iterator[torch.Tensor]:
        order = list(range(n))
        rng.shuffle(order)
        return (torch.tensor(order[start:start + cfg.batch_tokens]) for start in range(0, n, cfg.batch_tokens))

    return run_epochs(head, cfg, history, bar, max(1, math.ceil(n / cfg.batch_tokens)), shuffled,
                      lambda rows: loss_and_hits(head, train_set, rows)[0], lambda: evaluate(head, held_out), on_epoch)


def teach_stage(stages, rows: list[dict]) -> list[Taught]:
    """Each row's final hidden states and soft labels, kept in ``taught-medusa/``."""
    return stages.taught(rows, "taught-medusa", "final hidden states and soft labels",
                         lambda ids, reply_start: teach(stages.backend, ids, reply_start))


def train_and_export(stages, taught: list[Taught], rows: list[dict], draft_ids: torch.Tensor, num_heads: int,
                     out: Path, resume: bool) -> History:
    b = stages.backend
    index = draft_index(draft_ids, b.vocab_size)
    train_set = positions([t for t, r in zip(taught, rows) if not r["held_out"]], num_heads, index)
    held_out = positions([t for t, r in zip(taught, rows) if r["held_out"] and r["greedy"]], num_heads, index)

    def new() -> MedusaHead:
        try:
            embed = b.token_embeddings()
        except NotImplementedError:
            embed = None  # a random start: slower to train, as good in the end
        return new_head(num_heads, b.hidden_size, b.vocab_size, draft_ids, embed)

    return stages.checkpointed(
        "checkpoint-medusa", out, resume, save_medusa, new,
        lambda path: MedusaHead.load(path, b),
        lambda head, history, keep: train(head, train_set, held_out, stages.plan.train, stages.bar, history, keep),
        lambda last: ", ".join(f"{k.split('@')[1]}: {v}" for k, v in last.items() if k.startswith("mean_")),
        {"kind": "medusa", "heads": num_heads, "train_positions": int(train_set.h.shape[0]),
         "held_out_positions": int(held_out.h.shape[0])})
