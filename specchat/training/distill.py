"""Self-distillation: the target answers the training prompts ``n_seq`` at a time in a second
llama.cpp context; given ``layer_ids`` the same decodes hand out what the head trains on.
Design notes: docs/design/training.md
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from specchat.training.teacher import Taught, top_law


@dataclass
class Sample:
    """One distilled conversation: ``ids`` the prompt and the reply, which starts at
    ``reply_start``; ``taught``: its features and soft labels, given layers."""

    ids: list[int]
    reply_start: int
    taught: Taught | None = None


def _taught(rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], ids: list[int], reply_start: int) -> Taught:
    """A slot's gathered rows of (features, top ids, top p) → its ``Taught``."""
    features, top_ids, top_p = (torch.cat(parts) for parts in zip(*rows))
    return Taught(torch.tensor(ids[:features.shape[0]], dtype=torch.long), features, top_ids, top_p, reply_start)


class BatchedGenerator:
    def __init__(self, backend, n_seq: int = 8, n_ctx_per_seq: int = 768, layer_ids: tuple[int, ...] = (),
                 top: int = 32) -> None:
        from specchat.engine.backends.llamacpp_batch import LlamaCppBatch

        self.context = LlamaCppBatch(backend, n_seq, n_ctx_per_seq)
        self.n_seq, self.n_ctx_per_seq = n_seq, n_ctx_per_seq
        self.eos = backend.eos_token_ids
        self.layers, self.top = tuple(layer_ids), top
        if self.layers:  # the backend declared provides_features before it gets here
            self.context.request_features(self.layers)

    def close(self) -> None:
        self.context.close()

    def _decode(self, rows: list[tuple[int, int, int, bool]]) -> tuple[np.ndarray, np.ndarray | None]:
        """rows: (token, position, seq_id, wants logits) → (logits [n_wanted, V], the
        layers' inputs [n_rows, layers·H] or None without layers), both in row order."""
        logits = self.context.decode(rows)
        return logits, self.context.features if self.layers else None

    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperatures: list[float],
                 seed: int = 0, progress: Callable[[int], None] | None = None) -> Iterator[tuple[int, Sample]]:
        """Yields (prompt index, sample) as replies finish (not in prompt order)."""
        rng = np.random.default_rng(seed)
        queue = list(range(len(prompts)))[::-1]
        slots: dict[int, tuple[int, list[int], int]] = {}  # seq → (prompt index, ids, reply start)
        pending: dict[int, np.ndarray] = {}  # seq → logits of its last token
        records: dict[int, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}  # seq → its rows

        def start(seq: int) -> None:
            index = queue.pop()
            ids = list(prompts[index][: self.n_ctx_per_seq - max_new_tokens - 1])
            records[seq] = []
            for first in range(0, len(ids), self.context.n_batch):
                chunk = ids[first:first + self.context.n_batch]
                rows = [(t, first + i, seq, bool(self.layers) or first + i == len(ids) - 1) for i, t in enumerate(chunk)]
                logits, features = self._decode(rows)
                if features is not None:
                    records[seq].append((torch.from_numpy(features).to(torch.bfloat16), *top_law(logits, self.top)))
            slots[seq] = (index, ids, len(ids))
            pending[seq] = logits[-1]

        for seq in range(self.n_seq):
            if queue:
                start(seq)
        while slots:
            rows = []
            for seq, (index, ids, reply_start) in list(slots.items()):
                token = self._pick(pending[seq], temperatures[index], rng)
                ids.append(token)
                if progress:
                    progress(1)
                if token in self.eos or len(ids) - reply_start >= max_new_tokens:
                    del slots[seq]
                    self.context.drop(seq)
                    rows_kept = records.pop(seq)
                    yield index, Sample(ids, reply_start, _taught(rows_kept, ids, reply_start) if self.layers else None)
                    if queue:
                        start(seq)
                    continue
                rows.append((token, len(ids) - 1, seq, True))
            if rows:
                logits, features = self._decode(rows)
                if features is not None:
                    features = torch.from_numpy(features).to(torch.bfloat16)
                    top_ids, top_p = top_law(logits, self.top)
                for k, (_, _, seq, _) in enumerate(rows):
                    pending[seq] = logits[k]
                    if features is not None:
                        records[seq].append((features[k:k + 1], top_ids[k:k + 1], top_p[k:k + 1]))

    @staticmethod
    def _pick(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
        if temperature <= 0:
            return int(logits.argmax())
        z = logits.astype(np.float64) / temperature
        cdf = np.cumsum(np.exp(z - z.max()))
        # inverse CDF (rng.choice(p=…) validates and copies p on every call)
        return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), cdf.size - 1))
