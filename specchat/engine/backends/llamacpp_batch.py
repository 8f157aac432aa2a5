"""A second llama.cpp context on a loaded model, with room for several sequences.

One ``llama_decode`` then runs tokens of many sequences, each row tagged with its
``seq_id`` and position; with ``kv_unified`` off each sequence attends over its own cells
only, and ``drop`` clears a sequence's cells from a position on (a rejected draft, a
finished reply) without touching the others. Used by the batched engine (engine/
batched.py) and by self-distillation (training/distill.py).
"""

from __future__ import annotations

import numpy as np

N_BATCH = 512  # rows one decode takes at most (llama.cpp may lower it to n_ctx: read back)


def submission_order(rows: list[tuple[int, int, int, bool]]) -> list[int]:
    """The order :meth:`LlamaCppBatch.decode` hands rows to llama.cpp in: grouped by
    sequence, ascending seq_id, stable. What llama.cpp returns per batch row (a layer's
    inputs) comes in this order, not the caller's."""
    return sorted(range(len(rows)), key=lambda i: rows[i][2])


class BatchContextError(RuntimeError):
    """llama.cpp would not open the context (too many sequences, or its KV cache does
    not fit): the caller knows which setting asked for it and says so."""


class LlamaCppBatch:
    def __init__(self, backend, n_seq: int, n_ctx_per_seq: int) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_seq * n_ctx_per_seq
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_seq_max = n_seq
        params.kv_unified = False  # each sequence attends over its own cells only
        params.n_threads = params.n_threads_batch = backend.n_threads
        params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if backend.flash_attn
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)  # as the backend runs
        self.ctx = llama_cpp.llama_init_from_model(backend.llm._model.model, params)
        if not self.ctx:
            raise BatchContextError(f"llama.cpp could not open a batched context of {n_seq} sequences × "
                                    f"{n_ctx_per_seq} tokens")
        # a batch past what the context took aborts the process: chunk by what it took
        self.n_batch = min(N_BATCH, llama_cpp.llama_n_batch(self.ctx), llama_cpp.llama_n_ubatch(self.ctx))
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(N_BATCH, 0, 1)
        self.n_seq, self.n_ctx_per_seq, self.vocab = n_seq, n_ctx_per_seq, backend.vocab_size

    def close(self) -> None:
        if self.ctx:
            self.llama_cpp.llama_batch_free(self.batch)
            self.llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """rows: (token, position, seq_id, wants logits), at most ``n_batch`` → the logits of
        the rows that want them, in row order [n_wanted, V] (a copy: llama.cpp reuses its
        buffer at the next decode)."""
        # rows go to llama.cpp grouped by sequence in ascending seq_id: without a unified KV
        # cache it splits a batch whose sequences come in another order into one micro-
        # batch per sequence (measured: 4 one-token sequences in descending order took 71
        # ms a decode, in ascending order 23); the logits come back in the caller's order
        order = submission_order(rows)
        b = self.batch
        b.n_tokens = len(rows)
        for i, r in enumerate(order):
            token, pos, seq, wants = rows[r]
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, wants
            b.seq_id[i][0] = seq
        code = self.llama_cpp.llama_decode(self.ctx, b)
        if code != 0:
            raise RuntimeError(f"llama_decode failed (code {code})")
        wanted = [r for r in order if rows[r][3]]
        if not wanted:
            return np.empty((0, self.vocab), dtype=np.float32)
        pointer = self.llama_cpp.llama_get_logits(self.ctx)
        logits = np.ctypeslib.as_array(pointer, shape=(len(wanted), self.vocab))
        back = np.argsort(np.asarray(wanted), kind="stable")  # sorted position of each wanted row, in row order
        return logits[back]  # a copy (fancy indexing): llama.cpp reuses its buffer at the next decode

    def decode_all(self, rows: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """As :meth:`decode`, for any number of rows (``n_batch`` at a time)."""
        parts = [self.decode(rows[i:i + self.n_batch]) for i in range(0, len(rows), self.n_batch)]
        return np.concatenate(parts) if parts else np.empty((0, self.vocab), dtype=np.float32)

    def drop(self, seq: int, start: int = 0) -> None:
        """Clears sequence ``seq``'s cells from position ``start`` on (0: all of them)."""
        if not self.llama_cpp.llama_memory_seq_rm(self.memory, seq, start if start > 0 else -1, -1):
            raise RuntimeError("llama.cpp could not drop a sequence's cells")
