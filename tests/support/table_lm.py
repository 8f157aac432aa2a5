"""A table language model behind the engine's Backend seam: the logits of the next token
are a fixed random row chosen by the last two ids (an order-2 Markov chain). Float64, a
vocabulary of 16 (or padded/cut for drafts), no transformers in the loop — a forward is
a table lookup, so statistical tests can afford thousands of multi-step samples, and the
exact joint distribution of any continuation is enumerable."""

from __future__ import annotations

import copy
import functools

import torch

from specchat.engine.backends import Backend, common_prefix_length
from specchat.engine.sampling import SamplingParams, warp

VOCAB = 16


def random_table(seed: int, rows: int = VOCAB, width: int = VOCAB, scale: float = 2.5) -> torch.Tensor:
    """[rows, rows, width] logits, one row per (second-to-last, last) id."""
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(rows, rows, width, generator=gen, dtype=torch.float64)


def noisy(table: torch.Tensor, seed: int, noise: float, width: int | None = None) -> torch.Tensor:
    """A draft's table: the target's plus noise, cut or padded (with random rows) to ``width``."""
    gen = torch.Generator().manual_seed(seed)
    out = table + noise * torch.randn(table.shape, generator=gen, dtype=torch.float64)
    width = width or table.shape[-1]
    if width < out.shape[-1]:
        return out[..., :width].contiguous()
    pad = torch.randn(*out.shape[:-1], width - out.shape[-1], generator=gen, dtype=torch.float64)
    return torch.cat([out, pad], dim=-1)


class ContextLM(Backend):
    """A causal LM whose logits and hidden states at a position are a function of the ids
    up to it (``logits_after``, ``state``), with the id bookkeeping of a cached backend:
    what ``forward`` / ``extend`` / ``forward_tree`` / ``keep_path`` return and hand out
    (layer inputs, final hidden states) is what the transformers backend's would.
    ``lane()``: a fresh one over the same laws (one sequence of a batch,
    tests/support/batched.py); ``prefetch(contexts)``: where computing a law is dear, the
    laws of many contexts in one go (a no-op for a table)."""

    def __init__(self) -> None:
        self.eos_token_ids = frozenset()
        self._fresh()

    def _fresh(self) -> None:
        self._feature_layers: tuple[int, ...] = ()
        self._final_hidden = False
        self.reset()

    def lane(self) -> ContextLM:
        lane = copy.copy(self)
        lane._fresh()
        return lane

    def prefetch(self, contexts: list[tuple[int, ...]]) -> None:
        """Makes the laws after these contexts ready (a table's are)."""

    def logits_after(self, context: list[int]) -> torch.Tensor:
        """[V] logits of the next token after ``context`` (at least one id)."""
        raise NotImplementedError

    def state(self, layer: int, context: list[int]) -> torch.Tensor:
        """hidden_states[layer] [H] at the last position of ``context`` (num_layers: the final norm's output)."""
        raise NotImplementedError

    @property
    def ids(self) -> list[int]:
        return self._ids

    def _logits(self, seq: list[int], num_logits: int) -> torch.Tensor:
        return torch.stack([self.logits_after(seq[: len(seq) - num_logits + 1 + i]) for i in range(num_logits)])

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        self._feature_layers = tuple(layer_ids)

    def request_final_hidden(self) -> None:
        self._final_hidden = True

    def _hand_out(self, contexts: list[list[int]], start: int, num_logits: int) -> None:
        """States of the positions run in a call (``contexts``: each one's ids up to it,
        the first at position ``start``)."""
        if self._feature_layers:
            self.last_features = torch.stack([torch.cat([self.state(layer, c) for layer in self._feature_layers])
                                              for c in contexts]).float()
            self.features_start = start
        if self._final_hidden:
            self.last_final_hidden = torch.stack([self.state(self.num_layers, c)
                                                  for c in contexts[-num_logits:]]).float()
            self.final_hidden_start = start + len(contexts) - num_logits

    def forward(self, ids, extra=None, num_logits=1):
        keep = min(common_prefix_length(self._ids, list(ids)), len(ids) - 1)  # what a cache would reuse
        seq = list(ids) + (extra.tolist() if extra is not None else [])
        self._ids = seq
        if self._feature_layers or self._final_hidden:
            self._hand_out([seq[:i + 1] for i in range(keep, len(seq))], keep, num_logits)
        return self._logits(seq, num_logits)

    def extend(self, tokens, num_logits=1):
        start = len(self._ids)
        self._ids = self._ids + tokens.tolist()
        if self._feature_layers or self._final_hidden:
            self._hand_out([self._ids[:i + 1] for i in range(start, len(self._ids))], start, num_logits)
        return self._logits(self._ids, num_logits)

    def forward_tree(self, ids, tokens, parents):
        """Logits [N+1, V]: after ids, then after each node given the context and its ancestors."""
        ids = list(ids)
        keep = min(common_prefix_length(self._ids, ids), len(ids) - 1)
        paths: list[list[int]] = []
        for i, parent in enumerate(parents):
            paths.append((paths[parent] if parent >= 0 else []) + [tokens[i]])
        contexts = [ids[:i + 1] for i in range(keep, len(ids))] + [ids + path for path in paths]
        self._hand_out(contexts, keep, len(tokens) + 1)
        if self._final_hidden:
            self.final_hidden_start = len(ids) - 1
        self._ids = ids
        self._tree = (len(ids), list(tokens))
        return torch.stack([self.logits_after(c) for c in [ids] + [ids + path for path in paths]])

    def keep_path(self, path):
        base, tokens = self._tree
        if self._feature_layers and self.last_features is not None:
            offset = base - self.features_start
            rows = list(range(offset)) + [offset + i for i in path]
            self.last_features = self.last_features[rows]
        if self._final_hidden and self.last_final_hidden is not None:
            self.last_final_hidden = self.last_final_hidden[[0] + [i + 1 for i in path]]
        self._ids = self._ids + [tokens[i] for i in path]
        self._tree = None

    def reset(self):
        self._ids: list[int] = []
        self._tree: tuple[int, list[int]] | None = None
        self.last_features = self.last_final_hidden = None


class TableLM(ContextLM):
    """Stateless under the hood (logits depend only on the ids), with the id bookkeeping
    of a cached backend."""

    name = "table"

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table
        self.vocab_size = table.shape[-1]

    def logits_after(self, context: list[int]) -> torch.Tensor:
        a = context[-2] if len(context) > 1 else context[-1]
        return self.table[a, context[-1]]


def next_laws(lm: ContextLM, prompt: list[int], params: SamplingParams):
    """For power.tree_chi_square: the exact next-token law after prompt + each prefix."""

    def laws(prefixes):
        if not prefixes:
            return []
        lm.prefetch([tuple(prompt) + tuple(prefix) for prefix in prefixes])
        logits = torch.stack([lm.logits_after(prompt + list(prefix)) for prefix in prefixes])
        return warp(logits, params).tolist()

    return laws


def exact_joint(lm: ContextLM, prompt: list[int], length: int, params: SamplingParams) -> dict[tuple, float]:
    """P(x_1..x_length | prompt) under plain sampling with ``params``, for every sequence
    (one law per model and setting, enumerated once: callers only read it)."""
    return _joint(lm, tuple(prompt), length, params)


@functools.lru_cache(maxsize=None)
def _joint(lm: ContextLM, prompt: tuple[int, ...], length: int, params: SamplingParams) -> dict[tuple, float]:
    probs = {(): 1.0}
    for _ in range(length):
        prefixes = list(probs)
        lm.prefetch([prompt + pre for pre in prefixes])
        p = warp(torch.stack([lm.logits_after(list(prompt + pre)) for pre in prefixes]), params)
        nxt = {}
        for row, pre in enumerate(prefixes):
            for tok, pt in enumerate(p[row].tolist()):
                if pt > 0:
                    nxt[pre + (tok,)] = probs[pre] * pt
        probs = nxt
    return probs


class FeatureTableLM(TableLM):
    """A TableLM that also hands out hidden states as the transformers backend does: the
    inputs of requested layers (EAGLE-3 heads read them), the final hidden states (Medusa
    heads), and trees verified in one call (``forward_tree`` / ``keep_path``). A position's
    states, like its logits, are fixed random rows chosen by its id and the one before it,
    so they are a function of the context, as a causal model's are. ``config`` and
    ``get_input_embeddings`` are the two pieces of a transformers model that
    tests/support/tiny_heads.py reads to shape a head."""

    supports_trees = True
    provides_features = True
    provides_final_hidden = True

    def __init__(self, table: torch.Tensor, hidden: int = 16, num_layers: int = 2, seed: int = 7) -> None:
        super().__init__(table)
        gen = torch.Generator().manual_seed(seed)
        rows = table.shape[0]
        self.num_layers, self.hidden_size = num_layers, hidden
        self.embeddings = torch.randn(self.vocab_size, hidden, generator=gen, dtype=torch.float64)
        # states[l][a, b]: hidden_states[l] at a position holding b after a (l = num_layers: the final norm's output)
        self.states = torch.randn(num_layers + 1, rows, rows, hidden, generator=gen, dtype=torch.float64)
        self.config = _Config({"vocab_size": self.vocab_size, "hidden_size": hidden, "intermediate_size": 2 * hidden,
                               "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 128,
                               "num_hidden_layers": num_layers})

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return torch.nn.Embedding.from_pretrained(self.embeddings)

    def token_embeddings(self) -> torch.Tensor:
        return self.embeddings.float()

    def state(self, layer: int, context: list[int]) -> torch.Tensor:
        a = context[-2] if len(context) > 1 else context[-1]
        return self.states[layer, a, context[-1]]


class _Config(dict):
    """A model config as tiny_heads reads one: ``to_dict()`` and attributes."""

    def to_dict(self) -> dict:
        return dict(self)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
