"""The training loop, seen whole (nanoGPT's train.py is the model): AdamW with warm-up then
cosine decay, gradient clipping, batches of similar-length samples, held-out acceptance and
a checkpoint after every epoch.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from specchat.heads.eagle3 import Eagle3Head
from specchat.training.ttt import chain_lengths, collate, ttt_forward


@dataclass
class TrainConfig:
    epochs: int = 4
    steps: int = 4  # training-time-test depth
    batch_tokens: int = 2048
    max_len: int = 512
    lr: float = 1e-3
    warmup: int = 20
    weight_decay: float = 0.0
    seed: int = 0
    gammas: tuple[int, ...] = (1, 2, 3, 4)


@dataclass
class History:
    """Per epoch: the mean training loss and the held-out acceptance lengths (by γ) and
    per-step acceptance rates (conditional on the steps before being kept)."""

    loss: list[float] = field(default_factory=list)
    held_out: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    epochs_done: int = 0


def batches(samples: list, batch_tokens: int, max_len: int, rng: random.Random | None) -> list[list]:
    """Samples grouped by length into batches of about ``batch_tokens`` padded tokens."""
    groups, current = [], []
    for sample in sorted(samples, key=lambda s: len(s.ids)):  # shortest first: each is its group's longest
        if current and min(max_len, len(sample.ids)) * (len(current) + 1) > batch_tokens:
            groups.append(current)
            current = []
        current.append(sample)
    if current:
        groups.append(current)
    if rng is not None:
        rng.shuffle(groups)
    return groups


def draft_index(draft_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """[vocab] each target id's draft-vocabulary index, −1 outside it."""
    index = torch.full((vocab,), -1, dtype=torch.long)
    index[draft_ids] = torch.arange(draft_ids.numel())
    return index


@torch.no_grad()
def evaluate(head: Eagle3Head, samples: list, draft_index: torch.Tensor, cfg: TrainConfig) -> dict:
    """Held-out acceptance at temperature 0: the mean acceptance length for each γ and
    the conditional acceptance rate of each draft position."""
    chains, counts = [], 0
    for group in batches(samples, cfg.batch_tokens, cfg.max_len, None):
        batch = collate(group, draft_index, cfg.max_len)
        _, correct = ttt_forward(head, batch, cfg.steps)
        rows = torch.arange(batch.ids.shape[1])[None]
        labelled = (rows + 1 < batch.length[:, None]) & (rows + 1 >= batch.loss_from[:, None])
        chains.append(chain_lengths(correct)[labelled])
        counts += int(labelled.sum())
    chain = torch.cat(chains) if chains else torch.zeros(0, dtype=torch.long)
    lengths = {f"mean_acceptance_length@{g}": round(1.0 + float(chain.clamp_max(g).float().mean()), 4)
               if counts else None for g in cfg.gammas}
    reached = [int((chain >= j).sum()) for j in range(cfg.steps + 1)]  # rows whose drafts 1..j were all kept
    rates = [round(reached[j + 1] / reached[j], 4) if reached[j] else None for j in range(cfg.steps)]
    return {"positions": counts, **lengths, "acceptance_by_position": rates}


def train(head: Eagle3Head, train_set: list, held_out: list, draft_index: torch.Tensor, cfg: TrainConfig,
          bar: Callable[[int, str], object], history: History | None = None,
          on_epoch: Callable[[History], None] | None = None) -> History:
    """Trains ``head`` in place. ``bar(total, label)`` makes a progress bar (tqdm-like:
    update, set_postfix_str, close). Ctrl+C stops after the current batch; the caller
    saves what was reached (``history.epochs_done`` says how far)."""
    history = history or History()
    torch.manual_seed(cfg.seed + history.epochs_done)
    return run_epochs(head, cfg, history, bar, len(batches(train_set, cfg.batch_tokens, cfg.max_len, None)),
                      lambda rng: batches(train_set, cfg.batch_tokens, cfg.max_len, rng),
                      lambda group: ttt_forward(head, collate(group, draft_index, cfg.max_len), cfg.steps)[0],
                      lambda: evaluate(head, held_out, draft_index, cfg), on_epoch)


def run_epochs(head: torch.nn.Module, cfg: TrainConfig, history: History, bar: Callable[[int, str], object],
               per_epoch: int, epoch_batches: Callable[[random.Random], Iterable], loss_of: Callable,
               evaluate_head: Callable[[], dict], on_epoch: Callable[[History], None] | None) -> History:
    """The epoch loop every head trains with (EAGLE-3 here, Medusa in medusa.py): a
    batch a clipped AdamW step, the held-out figures and ``on_epoch`` after each epoch."""
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    total, done = per_epoch * cfg.epochs, per_epoch * history.epochs_done
    rng = random.Random(cfg.seed + history.epochs_done)
    started = time.perf_counter()
    progress = bar(total - done, "training")
    try:
        for epoch in range(history.epochs_done, cfg.epochs):
            head.train()
            losses = []
            for batch in epoch_batches(rng):
                # warm-up, then cosine decay over ``total`` batches
                lr = cfg.lr * min(1.0, (done + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * done / max(total, 1)))
                for g in optimizer.param_groups:
                    g["lr"] = lr
                optimizer.zero_grad(set_to_none=True)
                loss = loss_of(batch)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                losses.append(float(loss.detach()))
                done += 1
                progress.update(1)
                progress.set_postfix_str(f"epoch {epoch + 1}/{cfg.epochs} loss {sum(losses[-20:]) / len(losses[-20:]):.3f}")
            head.eval()
            history.loss.append(sum(losses) / max(len(losses), 1))
            history.held_out.append(evaluate_head())
            history.epochs_done = epoch + 1
            history.seconds += time.perf_counter() - started
            started = time.perf_counter()
            if on_epoch:
                on_epoch(history)
    finally:
        progress.close()
        head.eval()
    return history
