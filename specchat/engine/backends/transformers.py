"""The transformers backend: a causal LM with a DynamicCache keyed by the ids it holds
(see base.py); rollback crops the cache."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specchat.engine.backends.base import Backend, common_prefix_length


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
    dtype = next(model.parameters()).dtype
    return str(dtype).replace("torch.", "")


class TransformersBackend(Backend):
    """A transformers causal LM with a DynamicCache keyed by the ids it holds."""

    name = "transformers"

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.vocab_size = int(model.config.vocab_size)
        self.eos_token_ids = eos_ids_of(model)
        self.precision = precision_of(model)
        self.cache: DynamicCache | None = None
        self._ids: list[int] = []
        self._pending: list[torch.Tensor] = []  # ids fed as device tensors, not yet read back

    @property
    def ids(self) -> list[int]:
        """The ids whose KV the cache holds (reading this may sync the device)."""
        if self._pending:
            self._ids += torch.cat(self._pending).tolist()
            self._pending = []
        return self._ids

    def reset(self) -> None:
        self.cache, self._ids, self._pending = None, [], []

    def forward(self, ids: list[int], extra: torch.Tensor | None = None, num_logits: int = 1) -> torch.Tensor:
        # drafts (``extra``) stay on the device: appended without a host round trip
        cached = self.ids
        # the last host id is always run: its logits judge the first of ``extra``
        keep = min(common_prefix_length(cached, ids), len(ids) - 1)
        if extra is not None and extra.numel() == 0:
            extra = None
        if self.cache is not None and len(cached) > keep:
            self.cache.crop(keep - len(cached))
        del self._ids[keep:]
        new = torch.tensor(ids[keep:], dtype=torch.long, device=self.device)
        if extra is not None:
            new = torch.cat([new, extra.to(self.device)])
        return self._run(ids[keep:], new, num_logits)

    def extend(self, tokens: torch.Tensor, num_logits: int = 1) -> torch.Tensor:
        return self._run(None, tokens.to(self.device), num_logits)

    def _run(self, host_ids: list[int] | None, new: torch.Tensor, num_logits: int) -> torch.Tensor:
        if self.cache is None:
            self.cache = DynamicCache(config=self.model.config)
        try:
            out = self.model(input_ids=new[None], cache=self.cache, use_cache=True, logits_to_keep=num_logits)
        except BaseException:
            self.reset()  # a half-updated cache must never be trusted again
            raise
        if host_ids is not None:  # forward() read self.ids first, so nothing is pending
            self._ids += host_ids
            if new.numel() > len(host_ids):
                self._pending.append(new[len(host_ids):])
        else:
            self._pending.append(new)
        return out.logits[0, -num_logits:]

    def cache_bytes(self) -> int:
        total = 0
        for layer in getattr(self.cache, "layers", ()):
            for name in ("keys", "values"):
                tensor = getattr(layer, name, None)
                if tensor is not None and hasattr(tensor, "nbytes"):
                    total += int(tensor.nbytes)
        return total

    def parameter_bytes(self) -> int:
        return int(sum(p.numel() * p.element_size() for p in self.model.parameters()))
