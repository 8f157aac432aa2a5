"""A causal LM with a KV cache keyed by the token ids it holds.

Rollback is bookkeeping, as in gpt-fast's position-keyed cache: the cache remembers
which ids it has seen; a forward over a new sequence first crops the cache to the
longest common prefix, then runs only the rest. Rejected drafts are thus dropped at
the next call, a draft cache catches up after a bonus token by running the tokens it
missed, and a new chat turn reuses the KV of the shared conversation prefix.
"""

from __future__ import annotations

import time

import torch
from transformers import DynamicCache


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


def synchronize(device: torch.device) -> None:
    """Waits for queued device work so wall-clock timings are true on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CachedLM:
    """Wraps a transformers causal LM; ``forward(ids)`` returns logits for the last
    positions of ``ids``, reusing the KV cache of the longest cached prefix."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.vocab_size = int(model.config.vocab_size)
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
        """Logits [num_logits, V] for the last positions of ``ids + extra``.

        ids: the sequence on the host; extra: [m] more ids already on the device (drafts),
        appended without a host round trip.
        """
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
        """Runs device-side ``tokens`` [m] after what the cache holds; logits [num_logits, V]."""
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


class Stopwatch:
    """Wall-clock milliseconds with a device sync at each read."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = time.perf_counter()

    def lap(self) -> float:
        synchronize(self.device)
        now = time.perf_counter()
        ms = (now - self.start) * 1000.0
        self.start = now
        return ms
