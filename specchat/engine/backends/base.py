"""The one seam between the engine and a model: "the logits of the last k+1 positions of
these ids, reusing what you cached". Each backend keys its KV cache by the ids it holds and
rolls it back to the longest common prefix of a new call's ids; what differs between
backends is declared as data here, never probed (docs/design/backends.md).
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
    """A causal LM behind the engine's seam; each backend sets these in ``__init__``
    (what each means: docs/design/backends.md)."""

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
        """A context decoding ``n_seq`` sequences of up to ``n_ctx_per_seq`` tokens each."""
        raise NotImplementedError(self.batch_note)

    def forward(self, ids: list[int], extra: torch.Tensor | None = None, num_logits: int = 1) -> torch.Tensor:
        """Logits [num_logits, V] for the last positions of ``ids`` (host) + ``extra`` ([m]
        drafts on ``device``), reusing the cached common prefix; the last id of ``ids``
        always runs (its logits judge the first of ``extra``)."""
        keep = min(common_prefix_length(self.ids, ids), len(ids) - 1)
        return self._run(keep, ids[keep:] + (extra.tolist() if extra is not None else []), num_logits)

    def extend(self, tokens: torch.Tensor, num_logits: int = 1) -> torch.Tensor:
        """Runs ``tokens`` [m] after what the cache holds → logits [num_logits, V]."""
        return self._run(len(self.ids), tokens.tolist(), num_logits)

    def _run(self, keep: int, new: list[int], num_logits: int) -> torch.Tensor:
        """The cache cut to its first ``keep`` ids, then ``new`` run after them → logits [num_logits, V]."""
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def forward_tree(self, ids: list[int], tokens: list[int], parents: list[int] | tuple[int, ...]) -> torch.Tensor:
        """Logits [N+1, V]: at ids' last token, then after each node of a draft tree
        (``parents[i]``: node i's parent, -1 the last token), each seeing its ancestors only."""
        raise NotImplementedError(f"the {self.name} backend verifies chains of drafts only")

    def keep_path(self, path: list[int]) -> None:
        """After ``forward_tree``: the cache keeps the nodes on ``path`` (root down)."""
        raise NotImplementedError(f"the {self.name} backend verifies chains of drafts only")

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        """From the next call on, keep the inputs of these layers (``last_features``)."""
        raise NotImplementedError(self.features_note)

    def request_final_hidden(self) -> None:
        """From the next call on, hand out the final hidden states (``last_final_hidden``)."""
        raise NotImplementedError(self.final_hidden_note)

    def token_embeddings(self) -> torch.Tensor:
        """The input embedding matrix [V, H] (float32, on ``device``)."""
        raise NotImplementedError(self.features_note)

    def _keep_hidden_rows(self, base: int, path: list[int]) -> None:
        """After ``keep_path``: the handed-out features and final hidden states keep the
        context's rows and the kept path's nodes (node i's row is base + i)."""
        if self.last_features is not None:
            offset = base - self.features_start
            rows = torch.cat([torch.arange(offset), torch.tensor(path, dtype=torch.long) + offset])
            self.last_features = self.last_features.index_select(0, rows.to(self.last_features.device))
        if self.last_final_hidden is not None:
            self.last_final_hidden = self.last_final_hidden[[0] + [i + 1 for i in path]]

    def cache_bytes(self) -> int:  # 0: unknown
        return 0

    def parameter_bytes(self) -> int:  # 0: unknown
        return 0

