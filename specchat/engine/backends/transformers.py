"""The transformers backend: a causal LM with a DynamicCache keyed by the ids it holds;
rollback crops the cache (sliding windows and recurrent layers: docs/design/backends.md).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from specchat.engine.backends.base import Backend, common_prefix_length
from specchat.engine.trees.walk import depths


def eos_ids_of(model: torch.nn.Module) -> frozenset[int]:
    """All end-of-sequence ids the model's generation config (or config) names."""
    ids: set[int] = set()
    for cfg in (getattr(model, "generation_config", None), model.config):
        eos = getattr(cfg, "eos_token_id", None)
        if eos is not None:
            ids.update([eos] if isinstance(eos, int) else eos)
    return frozenset(ids)


def precision_of(model: torch.nn.Module) -> str:
    """"4bit-nf4" / "8bit" for bitsandbytes models, else the parameters' dtype."""
    quant = getattr(model.config, "quantization_config", None)
    if quant is not None:
        get = quant.get if isinstance(quant, dict) else lambda key, default=None: getattr(quant, key, default)
        if get("load_in_4bit"):
            return f"4bit-{get('bnb_4bit_quant_type', 'nf4')}"
        if get("load_in_8bit"):
            return "8bit"
    return str(next(model.parameters()).dtype).replace("torch.", "")


def cache_keyword(model: torch.nn.Module) -> str:
    """The name the model's forward takes its KV cache by (``cache`` in transformers ≥ 5.24,
    ``past_key_values`` before); the wrong one would vanish into **kwargs, so neither is refused."""
    parameters = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in parameters:
            return name
    raise TypeError(f"{type(model).__name__}.forward takes no KV cache (neither cache= nor past_key_values=)")


def rollback_support(cache: DynamicCache) -> tuple[bool, bool]:
    """(whether every layer of this cache can drop its last positions, whether any layer
    is a sliding window). Attention layers can — sliding ones only with past recording;
    recurrent and linear-attention state cannot be rolled back."""
    can, sliding = True, False
    for layer in getattr(cache, "layers", ()):
        if getattr(layer, "is_sliding", False):
            sliding = True
            can = can and getattr(layer, "record_past", False)
        elif hasattr(layer, "conv_states") or hasattr(layer, "recurrent_states"):
            can = False
        else:
            can = can and getattr(layer, "is_croppable", True)
    return can, sliding


def can_drop(cache: DynamicCache, drop: int) -> bool:
    """Whether dropping the last ``drop`` positions leaves every layer with all it needs
    next: a sliding layer of window W that has seen ``seen`` positions must still hold the
    W − 1 before the new end."""
    for layer in cache.layers:
        if not getattr(layer, "is_sliding", False) or not getattr(layer, "is_initialized", False):
            continue
        seen, window = layer.cumulative_length, layer.sliding_window
        if seen < window:
            continue  # it never had to forget anything
        first_held = seen - layer.keys.shape[-2]
        first_needed = max(0, seen - drop - (window - 1))
        if first_held > first_needed:
            return False
    return True


class TransformersBackend(Backend):
    """A transformers causal LM with a DynamicCache keyed by the ids it holds."""

    name = "transformers"
    batch_note = "it decodes one sequence at a time (serve and bench --concurrency need a GGUF target on llama.cpp)"

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.computes_on = frozenset({self.device.type})
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.vocab_size = int(model.config.vocab_size)
        self.eos_token_ids = eos_ids_of(model)
        self.precision = precision_of(model)
        self.can_rollback, self._sliding = rollback_support(self._new_cache())
        self._cache_keyword = cache_keyword(model)
        self.cache: DynamicCache | None = None
        self._ids: list[int] = []
        self._pending: list[torch.Tensor] = []  # ids fed as device tensors, not yet read back
        # hidden states: every decoder-only model transformers builds returns them
        self.provides_features = True
        self.num_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        self.hidden_size = int(getattr(model.config, "hidden_size", 0) or 0)
        self._feature_layers: tuple[int, ...] = ()
        # transformers' hidden_states[-1] is the final norm's output, what the lm_head reads
        # (tests/engine/proposers/test_medusa.py checks lm_head(it) == the logits)
        self.provides_final_hidden = True
        self._final_hidden = False
        self._tree: tuple[int, list[int]] | None = None  # (first node row, node ids) after forward_tree
        self.supports_trees = not self._sliding

    @property
    def ids(self) -> list[int]:
        """The ids whose KV the cache holds (reading this may sync the device)."""
        if self._pending:
            self._ids += torch.cat(self._pending).tolist()
            self._pending = []
        return self._ids

    def reset(self) -> None:
        self.cache, self._ids, self._pending = None, [], []

    def _new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        if hasattr(cache, "activate_past_recording"):
            cache.activate_past_recording()  # sliding layers keep what a rollback needs (module docstring)
        return cache

    def forward(self, ids: list[int], extra: torch.Tensor | None = None, num_logits: int = 1) -> torch.Tensor:
        # drafts (``extra``) stay on the device: appended without a host round trip
        cached = self.ids
        # the last host id is always run: its logits judge the first of ``extra``
        keep = min(common_prefix_length(cached, ids), len(ids) - 1)
        if extra is not None and extra.numel() == 0:
            extra = None
        try:
            keep = self._roll_back(keep)
            new = torch.tensor(ids[keep:], dtype=torch.long, device=self.device)
            if extra is not None:
                new = torch.cat([new, extra.to(self.device)])
            return self._feed(ids[keep:], new, num_logits)
        except BaseException:
            self.reset()  # a half-cropped or half-updated cache must never be trusted again
            raise

    def extend(self, tokens: torch.Tensor, num_logits: int = 1) -> torch.Tensor:
        try:
            return self._feed(None, tokens.to(self.device), num_logits)
        except BaseException:
            self.reset()
            raise

    def _roll_back(self, keep: int) -> int:
        """Makes the cache hold exactly ``self._ids[:keep]`` → ``keep``, or 0 where it had to be dropped."""
        drop = len(self._ids) - keep
        if self.cache is None:
            return 0
        if drop and not (self.can_rollback and can_drop(self.cache, drop)):
            self.reset()  # run everything again: exact, one prefill
            return 0
        if drop or self._sliding:
            self.cache.crop(-drop)  # crop(0) trims sliding layers back to their window
        del self._ids[keep:]
        return keep

    def forward_tree(self, ids: list[int], tokens: list[int], parents: list[int] | tuple[int, ...]) -> torch.Tensor:
        """One pass over ids' last token and a tree of drafts, node i at the position of its depth
        seeing the context and its ancestors only (a 4D mask) → logits [N+1, V]; the cache
        holds every node until ``keep_path``."""
        if self._sliding:
            raise ValueError("trees need a cache without sliding-window layers")
        cached = self.ids
        try:
            keep = self._roll_back(min(common_prefix_length(cached, ids), len(ids) - 1))
            host = ids[keep:]
            base = keep + len(host)  # the first node's row in the cache
            n, q_len = len(tokens), len(host) + len(tokens)
            depth = depths(parents)
            positions = list(range(keep, base)) + [base - 1 + d for d in depth]
            sees = torch.zeros(q_len, keep + q_len, dtype=torch.bool)
            sees[:, :keep] = True
            sees[:len(host), keep:base] = torch.ones(len(host), len(host), dtype=torch.bool).tril()
            sees[len(host):, keep:base] = True
            for i, parent in enumerate(parents):  # a node sees itself and its parent's ancestry
                row = len(host) + i
                if parent >= 0:
                    sees[row, base:base + n] = sees[len(host) + parent, base:base + n]
                sees[row, base + i] = True
            new = torch.tensor(host + list(tokens), dtype=torch.long, device=self.device)
            # hidden states: the last token's and every node's, until keep_path keeps the walked path's
            logits = self._call(new, n + 1, keep, position_ids=torch.tensor([positions], device=self.device),
                                attention_mask=sees[None, None].to(self.device))
            self._ids += host
            self._tree = (base, list(tokens))
            return logits
        except BaseException:
            self.reset()
            raise

    def keep_path(self, path: list[int]) -> None:
        """After ``forward_tree``: the KV of the nodes on ``path`` (root down) follows the context."""
        base, tokens = self._tree
        rows = torch.tensor(path, dtype=torch.long, device=self.device) + base
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                setattr(layer, name, torch.cat([t[..., :base, :], t.index_select(-2, rows)], -2))
        self._keep_hidden_rows(base, path)
        self._ids += [tokens[i] for i in path]
        self._tree = None

    def request_features(self, layer_ids: tuple[int, ...]) -> None:
        self._feature_layers = tuple(layer_ids)

    def request_final_hidden(self) -> None:
        self._final_hidden = True

    def token_embeddings(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight.detach().float()

    def _call(self, new: torch.Tensor, num_logits: int, start: int, **mask) -> torch.Tensor:
        """One forward of ``new`` (its first at position ``start``) → logits [num_logits, V],
        handing out the requested hidden states."""
        if self.cache is None:
            self.cache = self._new_cache()
        out = self.model(input_ids=new[None], use_cache=True, logits_to_keep=num_logits,
                         output_hidden_states=bool(self._feature_layers) or self._final_hidden,
                         **mask, **{self._cache_keyword: self.cache})
        if self._feature_layers:
            # hidden_states[l] is what enters decoder layer l (0: the embeddings)
            self.last_features = torch.cat([out.hidden_states[i][0] for i in self._feature_layers], -1).float()
            self.features_start = start
        if self._final_hidden:
            self.last_final_hidden = out.hidden_states[-1][0, -num_logits:].float()  # [num_logits, H]
            self.final_hidden_start = start + new.numel() - num_logits
        return out.logits[0, -num_logits:]

    def _feed(self, host_ids: list[int] | None, new: torch.Tensor, num_logits: int) -> torch.Tensor:
        logits = self._call(new, num_logits, len(self._ids) + sum(t.numel() for t in self._pending))
        if host_ids is not None:  # forward() read self.ids first, so nothing is pending
            self._ids += host_ids
            if new.numel() > len(host_ids):
                self._pending.append(new[len(host_ids):])
        else:
            self._pending.append(new)
        return logits

    def cache_bytes(self) -> int:
        layers = getattr(self.cache, "layers", ())
        tensors = (getattr(layer, name, None) for layer in layers for name in ("keys", "values"))
        return sum(int(t.nbytes) for t in tensors if t is not None and hasattr(t, "nbytes"))

    def parameter_bytes(self) -> int:
        return int(sum(p.numel() * p.element_size() for p in self.model.parameters()))
