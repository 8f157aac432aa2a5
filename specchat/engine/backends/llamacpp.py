"""The llama.cpp backend: a GGUF model in-process through llama-cpp-python's low-level API;
rollback removes a position range (``llama_memory_seq_rm``), logits come back as float32
host tensors whatever llama.cpp ran on.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from specchat.engine.backends.base import Backend, common_prefix_length
from specchat.engine.backends.llamacpp_features import FINAL_HIDDEN_ARCHITECTURES, LAYER_INPUT_ARCHITECTURES, bind
from specchat.engine.backends.llamacpp_batch import LlamaCppBatch, decode_rows
from specchat.engine.backends.llamacpp_tree import TREE_LEAVES, TreeLayout


def default_threads() -> int:
    """llama.cpp decodes fastest with one thread per core it may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def read_into_memory(file_bytes: int, thp_mode: str | None, available_bytes: int | None) -> bool:
    """Whether llama.cpp should read the weights into its own buffers rather than map the
    file: where the kernel offers transparent huge pages (``thp_mode``, the sysfs line,
    not "[never]") buffers are advised onto them (patch 0004) and a file mapping is not,
    and a step streams every weight (SmolLM2 Q4_1 6.4 against 6.9 ms a step). Only where
    the file fits twice in the memory available, so a big model still maps and pages."""
    return bool(thp_mode and "[never]" not in thp_mode and available_bytes) and 2 * file_bytes <= available_bytes


def weights_into_memory(model_path: str | Path) -> bool:
    """:func:`read_into_memory` for this file on this machine (False where it cannot tell)."""
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        meminfo = Path("/proc/meminfo").read_text().split()
        available = int(meminfo[meminfo.index("MemAvailable:") + 1]) * 1024
        return read_into_memory(os.path.getsize(model_path), mode, available)
    except (OSError, ValueError, IndexError):
        return False


def offload_devices(n_gpu_layers: int, num_layers: int) -> frozenset[str]:
    """Where llama.cpp computes with ``n_gpu_layers`` offloaded (-1: all). The output layer
    goes to the GPU only past the last block: offloading exactly num_layers leaves it on the CPU."""
    if n_gpu_layers == 0:
        return frozenset({"cpu"})
    if n_gpu_layers < 0 or n_gpu_layers > num_layers:
        return frozenset({"gpu"})
    return frozenset({"cpu", "gpu"})


PLACEHOLDER_CTX = 256  # the context Llama opens first (llama.cpp's smallest), replaced at once
MAX_CTX = 8192  # the cap on a model's trained context when n_ctx is 0 (serve reads it before loading)


class LlamaCppBackend(Backend):
    """A GGUF model. ``n_ctx`` 0 = the model's trained context (capped at ``max_ctx``);
    ``n_gpu_layers`` layers are offloaded where llama.cpp was built with a GPU backend.
    Flash attention is on, as llama.cpp's own tools have it where supported (llama-cpp-python
    turns it off unless asked): one-token steps on our 2-core CPU ran 5–15 % faster."""

    name = "llama.cpp"
    batches = True  # several sequences in one llama_decode, each its own seq_id (llamacpp_batch.py)

    def __init__(self, model_path: str | Path, *, n_ctx: int = 0, n_threads: int | None = None,
                 n_gpu_layers: int = 0, n_batch: int = 512, max_ctx: int = MAX_CTX, flash_attn: bool = True,
                 verbose: bool = False) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self._llama_cpp = llama_cpp
        if not verbose:
            quiet_logs(llama_cpp)
        threads = n_threads or default_threads()  # llama.cpp's own threads, not torch's
        trained = trained_context(llama_cpp, model_path) or max_ctx
        # Llama opens its context with one sequence, and a tree's branches are sequences of one
        # unified cache: the context is opened again from Llama's parameters with room for them
        self.llm = llama_cpp.Llama(
            model_path=str(model_path), n_ctx=PLACEHOLDER_CTX, n_batch=n_batch, n_ubatch=n_batch,
            n_threads=threads, n_threads_batch=threads, n_gpu_layers=n_gpu_layers, logits_all=False,
            flash_attn=flash_attn, verbose=verbose, use_mmap=not weights_into_memory(model_path),
        )
        params = self.llm.context_params
        params.n_ctx = n_ctx or min(trained, max_ctx)
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max, params.kv_unified = TREE_LEAVES, True
        placeholder, self.llm._ctx = self.llm._ctx, _internals.LlamaContext(model=self.llm._model, params=params,
                                                                            verbose=verbose)
        placeholder.close()
        self.model_path, self.n_threads = str(model_path), threads
        self.n_gpu_layers, self.flash_attn = n_gpu_layers, flash_attn
        self._ctx = self.llm._ctx.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        # llama.cpp clamps its batch to the n_ctx asked for (and pads the context past
        # it): a batch larger than its own aborts the process, so chunk by what it kept
        self._n_batch = min(n_batch, int(llama_cpp.llama_n_batch(self._ctx)), int(llama_cpp.llama_n_ubatch(self._ctx)))
        self._batch = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=TREE_LEAVES, verbose=verbose)
        self.device = torch.device("cpu")  # logits land on the host
        self.max_length = int(self.llm.n_ctx())
        self.vocab_size = int(self.llm.n_vocab())
        vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)
        self.eos_token_ids = frozenset(i for i in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, i))
        self.precision = "gguf:" + model_file_type(self.llm)
        self._ids: list[int] = []
        self._tree: TreeLayout | None = None  # after forward_tree, until keep_path
        self.supports_trees, self.max_tree_leaves = True, TREE_LEAVES
        self.num_layers = int(llama_cpp.llama_model_n_layer(self.llm._model.model))
        self.computes_on = offload_devices(n_gpu_layers, self.num_layers)
        self.uses_torch_threads = False
        self.hidden_size = int(llama_cpp.llama_model_n_embd(self.llm._model.model))
        self._layer_inputs = bind(llama_cpp)
        architecture = str(self.llm.metadata.get("general.architecture", "unknown"))
        self.provides_features = self._layer_inputs is not None and architecture in LAYER_INPUT_ARCHITECTURES
        if self._layer_inputs is None:
            self.features_note = "this llama.cpp build does not export the layer-input API heads read"
        elif not self.provides_features:
            self.features_note = (f"llama.cpp keeps no layer inputs for the {architecture!r} architecture "
                                  f"(it does for {', '.join(sorted(LAYER_INPUT_ARCHITECTURES))})")
        self._feature_layers: tuple[int, ...] = ()
        self.provides_final_hidden = architecture in FINAL_HIDDEN_ARCHITECTURES
        if not self.provides_final_hidden:
            self.final_hidden_note = (f"llama.cpp hands out no final hidden states for the {architecture!r} "
                                      f"architecture here (it does for {', '.join(sorted(FINAL_HIDDEN_ARCHITECTURES))})")
        self._final_hidden = False

    @property
    def ids(self) -> list[int]:
        return self._ids

    def open_batch(self, n_seq: int, n_ctx_per_seq: int):
        return LlamaCppBatch(self, n_seq, n_ctx_per_seq)

    def reset(self) -> None:
        self._llama_cpp.llama_memory_clear(self._memory, True)
        self._ids = []
        self._tree = None

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        if not self.provides_features:
            raise NotImplementedError(self.features_note)
        for layer in layer_ids:
            if not 0 <= layer < self.num_layers:
                raise ValueError(f"layer {layer} is not one of the model's {self.num_layers}")
            self._layer_inputs.enable(self._ctx, layer)
        self._feature_layers = tuple(layer_ids)

    def request_final_hidden(self) -> None:
        if not self.provides_final_hidden:
            raise NotImplementedError(self.final_hidden_note)
        self._final_hidden = True

    def token_embeddings(self) -> torch.Tensor:
        if self._layer_inputs is None:
            raise NotImplementedError(self.features_note)
        rows = self._layer_inputs.token_embeddings(self.llm._model.model, self.vocab_size, self.hidden_size)
        return torch.from_numpy(rows)

    def _run(self, keep: int, new: list[int], num_logits: int) -> torch.Tensor:
        self._advance(keep, new, num_logits)
        return self._logits(num_logits)

    def _advance(self, keep: int, new: list[int], num_logits: int) -> None:
        try:
            self._roll_back(keep, len(new))
            # the final batch is the last n_batch tokens, so it holds every position that
            # needs logits (num_logits ≤ k+1 ≤ n_batch); the prompt before it runs without
            bounds = list(range(0, max(len(new) - self._n_batch, 0), self._n_batch)) + [max(len(new) - self._n_batch, 0)]
            features, first = [], len(self._ids)
            for chunk, outputs, hidden in self._pieces(new, bounds, num_logits):
                n_past = len(self._ids)
                rows = [(token, n_past + i, (0,), i >= len(chunk) - outputs) for i, token in enumerate(chunk)]
                self._decode_rows(rows, n_past if hidden else None)
                self._ids += chunk
                if self._feature_layers and chunk:
                    features.append(self._read_features(len(chunk)))
            if features:
                self.last_features, self.features_start = torch.from_numpy(np.concatenate(features)), first
        except BaseException:
            self.reset()  # a half-updated cache must never be trusted again
            raise

    def _roll_back(self, keep: int, adding: int) -> None:
        """Drops a tree left unwalked, then the cached ids from ``keep`` on."""
        llama_cpp = self._llama_cpp
        if self._tree is not None:
            self._tree.keep(llama_cpp, self._memory, [])
            self._tree = None
        if len(self._ids) > keep:
            if not llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1):
                raise RuntimeError("llama.cpp could not roll its KV cache back")
            del self._ids[keep:]
        if len(self._ids) + adding > self.max_length:
            raise RuntimeError(f"{len(self._ids) + adding} tokens exceed the context of {self.max_length}")

    def _read_features(self, n_rows: int) -> np.ndarray:
        return np.concatenate([self._layer_inputs.read(self._ctx, layer, n_rows, self.hidden_size)
                               for layer in self._feature_layers], axis=1)

    def _logits(self, n: int) -> torch.Tensor:
        pointer = self._llama_cpp.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(pointer, shape=(n, self.vocab_size))
        return torch.from_numpy(rows.copy())  # [n, V]; the buffer is reused by the next decode

    def forward_tree(self, ids: list[int], tokens: list[int], parents: list[int] | tuple[int, ...]) -> torch.Tensor:
        """One decode over ids' new tokens and a tree of drafts (llamacpp_tree.py) → logits
        [N+1, V]; the cache holds every node until ``keep_path``."""
        if len(tokens) + 1 > self._n_batch:
            raise ValueError(f"a tree of {len(tokens)} drafts: one llama.cpp decode takes {self._n_batch - 1}")
        keep = min(common_prefix_length(self._ids, ids), len(ids) - 1)
        host = ids[keep:]
        before = None
        # a long new part runs first, as a chain; so does all but the last token where final
        # hidden states are wanted (llama.cpp then outputs every row of the decode)
        if len(host) + len(tokens) > self._n_batch or (self._final_hidden and len(host) > 1):
            self._advance(keep, host[:-1], 0)
            before = self.last_features if self._feature_layers else None
            keep, host = len(self._ids), host[-1:]
        base = keep + len(host)
        tree = TreeLayout.of(base, tokens, parents)
        llama_cpp = self._llama_cpp
        try:
            self._roll_back(keep, len(host) + max(tree.positions) - base + 1)
            for b in range(1, tree.leaves):  # sequences 1..L-1 share sequence 0's cells (they hold none)
                llama_cpp.llama_memory_seq_cp(self._memory, 0, b, -1, -1)
            self._tree = tree
            if not self._final_hidden:
                self.last_final_hidden = None
            # with final hidden states on, every row's: the last context token's (at keep), then the nodes'
            self._decode_rows(tree.rows(host, keep), keep if self._final_hidden else None)
            if self._feature_layers:
                rows = torch.from_numpy(self._read_features(len(host) + len(tokens)))
                if before is not None:
                    self.last_features = torch.cat([before, rows])
                else:
                    self.last_features, self.features_start = rows, keep
            self._ids += host
        except BaseException:
            self.reset()
            raise
        return self._logits(len(tokens) + 1)

    def keep_path(self, path: list[int]) -> None:
        """After ``forward_tree``: the nodes on ``path`` (root down) stay as the context's next tokens."""
        tree, self._tree = self._tree, None
        try:
            tree.keep(self._llama_cpp, self._memory, path)
        except BaseException:
            self.reset()
            raise
        self._keep_hidden_rows(tree.base, path)
        self._ids += [tree.tokens[i] for i in path]

    def _pieces(self, new: list[int], bounds: list[int], num_logits: int):
        """(tokens, num_logits, whether to hand out final hidden states) per decode; with those
        on llama.cpp outputs every token, so the last chunk's tokens before the wanted run apart."""
        for start, end in zip(bounds, bounds[1:] + [len(new)]):
            chunk = new[start:end]
            if end < len(new) or not self._final_hidden:
                yield chunk, num_logits if end == len(new) else 0, False
                continue
            if len(chunk) > num_logits:
                yield chunk[:-num_logits], 0, False
            yield chunk[-num_logits:], num_logits, True

    def _decode_rows(self, rows: list[tuple[int, int, tuple[int, ...], bool]], hidden_at: int | None = None) -> None:
        """One llama_decode of rows (token, position, sequences, wants logits); with ``hidden_at``
        every row's final hidden state too (``last_final_hidden``, from position ``hidden_at``)."""
        llama_cpp = self._llama_cpp
        if hidden_at is not None:
            llama_cpp.llama_set_embeddings(self._ctx, True)
        try:
            decode_rows(llama_cpp, self._ctx, self._batch.batch, rows)
            if hidden_at is not None:
                pointer = llama_cpp.llama_get_embeddings(self._ctx)
                if not pointer:
                    raise RuntimeError("llama.cpp handed out no final hidden states")
                out = np.ctypeslib.as_array(pointer, shape=(len(rows), self.hidden_size))
                self.last_final_hidden, self.final_hidden_start = torch.from_numpy(out.copy()), hidden_at
        finally:
            if hidden_at is not None:
                llama_cpp.llama_set_embeddings(self._ctx, False)

    def cache_bytes(self) -> int:
        if not self._ids:
            return 0
        return int(self._llama_cpp.llama_state_seq_get_size(self._ctx, 0))

    def parameter_bytes(self) -> int:
        return int(self._llama_cpp.llama_model_size(self.llm._model.model))


_log_lines: list[str] = []
_log_callback = None


def quiet_logs(llama_cpp) -> None:
    """llama.cpp logs to stderr, where the TUI draws: its lines are kept in memory instead
    (load errors name the last few)."""
    global _log_callback
    if _log_callback is not None:
        return

    @llama_cpp.llama_log_callback
    def callback(level, text, user_data):
        _log_lines.append(text.decode("utf-8", errors="replace"))
        del _log_lines[:-40]

    _log_callback = callback  # keep the ctypes callback alive
    llama_cpp.llama_log_set(callback, None)


def last_log_lines(n: int = 3) -> str:
    lines = [line.strip() for line in "".join(_log_lines).splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def trained_context(llama_cpp, model_path: str | Path) -> int:
    """The context length the model was trained with (0 if the file cannot say)."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
    if not model:
        raise ValueError(f"llama.cpp cannot read the model file ({last_log_lines()})")
    try:
        # a vocab-only model reports n_ctx_train 0: the GGUF's metadata says it
        architecture = _meta(llama_cpp, model, "general.architecture")
        trained = _meta(llama_cpp, model, f"{architecture}.context_length") if architecture else None
        return int(trained) if trained and trained.isdigit() else int(llama_cpp.llama_model_n_ctx_train(model))
    finally:
        llama_cpp.llama_model_free(model)


def _meta(llama_cpp, model, key: str) -> str | None:
    import ctypes

    buffer = ctypes.create_string_buffer(256)
    if llama_cpp.llama_model_meta_val_str(model, key.encode(), buffer, len(buffer)) < 0:
        return None
    return buffer.value.decode("utf-8", errors="replace")


def model_file_type(llm) -> str:
    """The GGUF's weight format as llama.cpp names it, e.g. "Q4_1", "BF16"."""
    desc = llm.metadata.get("general.file_type")
    names = {"0": "F32", "1": "F16", "2": "Q4_0", "3": "Q4_1", "7": "Q8_0", "8": "Q5_0", "9": "Q5_1",
             "10": "Q2_K", "11": "Q3_K_S", "12": "Q3_K_M", "13": "Q3_K_L", "14": "Q4_K_S", "15": "Q4_K_M",
             "16": "Q5_K_S", "17": "Q5_K_M", "18": "Q6_K", "32": "BF16"}
    return names.get(str(desc), f"type {desc}" if desc is not None else "unknown")
