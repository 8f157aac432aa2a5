"""The one seam between the engine and a model.

The engine asks a backend for "the logits of the last k+1 positions of these ids,
reusing what you cached" and nothing else. Each backend keeps a KV cache keyed by the
ids it holds and rolls it back to the longest common prefix of a new call's ids.
A backend is a file of its own; what differs between them is declared as data here,
never probed.

Design notes: docs/design/backends.md
"""

from __future__ import annotations

import torch


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, compared at C speed
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Backend:
    """A causal LM behind the engine's seam; each backend sets these in ``__init__``.

    name, device (where logits live), max_length (tokens), vocab_size (V), eos_token_ids,
    precision ("float32", "gguf:Q4_1", …: near-tie rules depend on it), computes_on
    ({"cpu"}, {"cuda"}, {"cpu", "gpu"}), uses_torch_threads, can_rollback (False: the engine
    decodes without speculation), supports_trees / max_tree_leaves (None: no limit),
    provides_final_hidden (``last_final_hidden`` [num_logits, H] float32 from
    ``final_hidden_start``; ``final_hidden_note`` says why not), batches (``open_batch``;
    ``batch_note`` says why not). What each one means: docs/design/backends.md
    """

    name = "backend"
    device: torch.device = torch.device("cpu")
    max_length: int = 1 << 30
    vocab_size: int = 0
    eos_token_ids: frozenset[int] = frozenset()
    precision: str = "float32"
    computes_on: frozenset[str] = frozenset({"cpu"})
    uses_torch_threads: bool = True
    can_rollback: bool = True
    provides_features: bool = False
    features_note: str = "this backend cannot hand out hidden states"
    num_layers: int = 0
    hidden_size: int = 0
    last_features: torch.Tensor | None = None
    features_start: int = 0
    supports_trees: bool = False
    max_tree_leaves: int | None = None
    provides_final_hidden: bool = False
    final_hidden_note: str = "this backend cannot hand out its final hidden states"
    last_final_hidden: torch.Tensor | None = None
    final_hidden_start: int = 0
    batches: bool = False
    batch_note: str = "this backend decodes one sequence at a time"

    @property
    def ids(self) -> list[int]:
        """The ids whose KV the cache holds."""
        raise NotImplementedError

    def open_batch(self, n_seq: int, n_ctx_per_seq: int):
        """A context decoding ``n_seq`` sequences of up to ``n_ctx_per_seq`` tokens together
        (only where ``batches``)."""
        raise NotImplementedError(self.batch_note)

    def forward(self, ids: list[int], extra: torch.Tensor | None = None, num_logits: int = 1) -> torch.Tensor:
        """Logits [num_logits, V] for the last positions of ``ids + extra``, reusing the
        cache of the longest common prefix of ``ids`` and what it holds (the last id of
        ``ids`` always runs: its logits judge the first of ``extra``).

        ids: the sequence on the host; extra: [m] more ids (drafts) on ``device``."""
        raise NotImplementedError

    def extend(self, tokens: torch.Tensor, num_logits: int = 1) -> torch.Tensor:
        """Runs ``tokens`` [m] after what the cache holds → logits [num_logits, V]."""
        raise NotImplementedError

    def reset(self) -> None:
        """Drops all cached state (a new chat)."""
        raise NotImplementedError

    def forward_tree(self, ids: list[int], tokens: list[int], parents: list[int] | tuple[int, ...]) -> torch.Tensor:
        """Logits [N+1, V]: at ids' last token, then after each node of a draft tree
        (``parents[i]``: node i's parent, -1 the last token), each node seeing only the
        context and its ancestors. Only where ``supports_trees``."""
        raise NotImplementedError(f"the {self.name} backend verifies chains of drafts only")

    def keep_path(self, path: list[int]) -> None:
        """After ``forward_tree``: the cache keeps the nodes on ``path`` (root down)."""
        raise NotImplementedError(f"the {self.name} backend verifies chains of drafts only")

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        """From the next call on, keep the inputs of these layers (see the class docstring)."""
        raise NotImplementedError(self.features_note)

    def request_final_hidden(self) -> None:
        """From the next call on, hand out the final hidden states (see the class docstring)."""
        raise NotImplementedError(self.final_hidden_note)

    def token_embeddings(self) -> torch.Tensor:
        """The input embedding matrix [V, H] (float32, on ``device``), for heads that share it."""
        raise NotImplementedError(self.features_note)

    def cache_bytes(self) -> int:
        """Bytes the KV cache holds now (0 when unknown)."""
        return 0

    def parameter_bytes(self) -> int:
        """Bytes of the model's weights (0 when unknown)."""
        return 0

