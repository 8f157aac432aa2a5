"""Self-distillation: the target answers the training prompts, many at once.

llama.cpp decodes several sequences in one ``llama_decode`` (each token tagged with its
``seq_id``), and on a CPU a batch of 8 costs about twice one token, so answering the
corpus 8 at a time takes a quarter of the time one by one. This opens a second llama.cpp
context on the already loaded model with room for ``n_seq`` sequences; a slot that
finishes (end of turn or ``max_new_tokens``) is cleared (``llama_memory_seq_rm``) and
takes the next prompt at once (continuous batching).

Half the replies are greedy, half sampled at temperature 0.8, so the head sees both what
the target says most and how its sampled replies go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class Sample:
    """One distilled conversation: ``ids`` = the chat-formatted prompt and the reply;
    the reply starts at ``reply_start``."""

    ids: list[int]
    reply_start: int


class BatchedGenerator:
    def __init__(self, backend, n_seq: int = 8, n_ctx_per_seq: int = 768) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_seq * n_ctx_per_seq
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = n_seq
        params.kv_unified = False  # each sequence attends over its own cells only
        params.n_threads = params.n_threads_batch = backend.n_threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        self.ctx = llama_cpp.llama_init_from_model(backend.llm._model.model, params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not open a batched context")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)
        self.n_seq, self.n_ctx_per_seq = n_seq, n_ctx_per_seq
        self.vocab = backend.vocab_size
        self.eos = backend.eos_token_ids

    def close(self) -> None:
        self.llama_cpp.llama_batch_free(self.batch)
        self.llama_cpp.llama_free(self.ctx)

    def _decode(self, rows: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """rows: (token, position, seq_id, wants logits) → logits [n_wanted, V]."""
        b = self.batch
        b.n_tokens = len(rows)
        for i, (token, pos, seq, wants) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, wants
            b.seq_id[i][0] = seq
        code = self.llama_cpp.llama_decode(self.ctx, b)
        if code != 0:
            raise RuntimeError(f"llama_decode failed (code {code})")
        wanted = sum(r[3] for r in rows)
        pointer = self.llama_cpp.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(pointer, shape=(wanted, self.vocab)).copy()

    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperatures: list[float],
                 seed: int = 0, progress: Callable[[int], None] | None = None) -> Iterator[tuple[int, Sample]]:
        """Yields (prompt index, sample) as replies finish (not in prompt order)."""
        rng = np.random.default_rng(seed)
        queue = list(range(len(prompts)))[::-1]
        slots: dict[int, tuple[int, list[int], int]] = {}  # seq → (prompt index, ids, reply start)
        pending: dict[int, np.ndarray] = {}  # seq → logits of its last token

        def start(seq: int) -> None:
            index = queue.pop()
            ids = list(prompts[index][: self.n_ctx_per_seq - max_new_tokens - 1])
            for first in range(0, len(ids), 512):
                chunk = ids[first:first + 512]
                rows = [(t, first + i, seq, first + i == len(ids) - 1) for i, t in enumerate(chunk)]
                logits = self._decode(rows)
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
                    self.llama_cpp.llama_memory_seq_rm(self.memory, seq, -1, -1)
                    yield index, Sample(ids, reply_start)
                    if queue:
                        start(seq)
                    continue
                rows.append((token, len(ids) - 1, seq, True))
            if rows:
                order = [r[2] for r in rows]
                for seq, logits in zip(order, self._decode(rows)):
                    pending[seq] = logits

    @staticmethod
    def _pick(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
        if temperature <= 0:
            return int(logits.argmax())
        z = logits.astype(np.float64) / temperature
        p = np.exp(z - z.max())
        return int(rng.choice(p.size, p=p / p.sum()))
