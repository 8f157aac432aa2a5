"""A second llama.cpp context on a loaded model with room for several sequences, each
attending over its own cells only (``kv_unified`` off): for the batched engine, a batched
request's draft model (:class:`SequenceBackend`) and self-distillation.
"""

from __future__ import annotations

import numpy as np
import torch

from specchat.engine.backends.base import Backend

N_BATCH = 512  # rows one decode takes at most (llama.cpp may lower it to n_ctx: read back)


def decode_rows(llama_cpp, ctx, batch, rows: list[tuple[int, int, tuple[int, ...], bool]]) -> None:
    """One llama_decode through ``batch`` of rows (token, position, sequences, wants logits)."""
    batch.n_tokens = len(rows)
    for i, (token, position, seqs, wants) in enumerate(rows):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, position, len(seqs), wants
        for j, seq in enumerate(seqs):
            batch.seq_id[i][j] = seq
    code = llama_cpp.llama_decode(ctx, batch)
    if code != 0:
        raise RuntimeError(f"llama_decode failed (code {code})")


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
        self.n_seq, self.n_ctx_per_seq, self.vocab, self.backend = n_seq, n_ctx_per_seq, backend.vocab_size, backend
        self.layers: tuple[int, ...] = ()  # layers whose inputs every decode hands out (an EAGLE-3 head's)
        self.features: np.ndarray | None = None  # the last decode_all's [rows, layers·H], in row order

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        """From the next decode on, keep the inputs of these layers for every row."""
        if not self.backend.provides_features:
            raise NotImplementedError(self.backend.features_note)
        if self.layers and tuple(layer_ids) != self.layers:
            raise ValueError(f"this batch hands out layers {self.layers} already (one head's per batch)")
        for layer in layer_ids:
            self.backend._layer_inputs.enable(self.ctx, layer)
        self.layers = tuple(layer_ids)

    def close(self) -> None:
        if self.ctx:
            self.llama_cpp.llama_batch_free(self.batch)
            self.llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """rows: (token, position, seq_id, wants logits), at most ``n_batch`` → the logits of
        the rows that want them, in row order [n_wanted, V] (a copy: llama.cpp reuses its
        buffer at the next decode)."""
        # rows go to llama.cpp grouped by ascending seq_id (any other order costs a micro-batch
        # per sequence: docs/design/batching.md); the logits come back in the caller's order
        order = sorted(range(len(rows)), key=lambda i: rows[i][2])  # stable
        decode_rows(self.llama_cpp, self.ctx, self.batch, [(t, p, (s,), w) for t, p, s, w in (rows[r] for r in order)])
        if self.layers:  # llama.cpp hands them out in its batch order: back to the caller's
            inputs = self.backend._layer_inputs
            rows_read = np.concatenate([inputs.read(self.ctx, layer, len(rows), self.backend.hidden_size)
                                        for layer in self.layers], axis=1)
            self.features = rows_read[np.argsort(order, kind="stable")]
        wanted = [r for r in order if rows[r][3]]
        if not wanted:
            return np.empty((0, self.vocab), dtype=np.float32)
        pointer = self.llama_cpp.llama_get_logits(self.ctx)
        logits = np.ctypeslib.as_array(pointer, shape=(len(wanted), self.vocab))
        back = np.argsort(np.asarray(wanted), kind="stable")  # sorted position of each wanted row, in row order
        return logits[back]  # a copy (fancy indexing): llama.cpp reuses its buffer at the next decode

    def decode_all(self, rows: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """As :meth:`decode`, for any number of rows (``n_batch`` at a time); with layers
        requested, ``features`` then holds every row's, in row order."""
        parts, features = [], []
        for i in range(0, len(rows), self.n_batch):
            parts.append(self.decode(rows[i:i + self.n_batch]))
            if self.layers:
                features.append(self.features)
        self.features = np.concatenate(features) if features else None
        return np.concatenate(parts) if parts else np.empty((0, self.vocab), dtype=np.float32)

    def lane(self, seq: int) -> SequenceBackend:
        """Sequence ``seq`` as a Backend of its own (what a proposer drafts with or reads)."""
        return SequenceBackend(self, seq)

    def drop(self, seq: int, start: int = 0) -> None:
        """Clears sequence ``seq``'s cells from position ``start`` on (0: all of them)."""
        if not self.llama_cpp.llama_memory_seq_rm(self.memory, seq, start if start > 0 else -1, -1):
            raise RuntimeError("llama.cpp could not drop a sequence's cells")


class SequenceBackend(Backend):
    """Sequence ``seq`` of a :class:`LlamaCppBatch` as a Backend of its own: a batched
    request's draft model drafts in it (its own cells in one context of the draft); on the
    target's batch a head reads the layer inputs the batched engine hands it here."""

    name = "batched llama.cpp"  # chains only: a tree's branches need a unified cache (llamacpp_tree.py)
    can_rollback = True
    uses_torch_threads = False

    def __init__(self, context: LlamaCppBatch, seq: int) -> None:
        model = context.backend
        self.context, self.seq = context, seq
        self.device, self.vocab_size, self.eos_token_ids = model.device, model.vocab_size, model.eos_token_ids
        self.precision, self.computes_on = model.precision, model.computes_on
        self.max_length = context.n_ctx_per_seq
        self.provides_features, self.features_note = model.provides_features, model.features_note
        self.num_layers, self.hidden_size = model.num_layers, model.hidden_size
        self.batch_note = "one sequence of a batch"
        self.final_hidden_note = "the batched llama.cpp engine hands out no final hidden states (Medusa heads read them)"
        self._ids: list[int] = []

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        self.context.request_features(layer_ids)

    def token_embeddings(self) -> torch.Tensor:
        return self.context.backend.token_embeddings()

    @property
    def ids(self) -> list[int]:
        return self._ids

    def _run(self, keep: int, new: list[int], num_logits: int) -> torch.Tensor:
        if keep + len(new) > self.max_length:
            raise RuntimeError(f"{keep + len(new)} tokens exceed this sequence's context of {self.max_length}")
        if len(self._ids) > keep:
            self.context.drop(self.seq, keep)
            del self._ids[keep:]
        rows = [(t, keep + i, self.seq, i >= len(new) - num_logits) for i, t in enumerate(new)]
        try:
            logits = self.context.decode_all(rows)
        except BaseException:
            self.reset()  # cells nobody can vouch for
            raise
        self._ids += new
        return torch.from_numpy(logits)

    def reset(self) -> None:
        self.context.drop(self.seq)
        self._ids = []
