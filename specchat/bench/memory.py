"""Memory figures for the benchmark: what the draft costs, and the process's peaks.

* draft parameter bytes: Σ numel · element_size over the draft model's parameters.
* draft KV bytes: Σ nbytes of the draft CachedLM's key/value tensors at the end of a
  request (the cache then holds the whole prompt and reply).
* peak GPU bytes (CUDA): ``torch.cuda.max_memory_allocated`` since the request began.
* RSS (CPU): the process's resident set after a request (psutil), and its lifetime
  peak (``resource.getrusage``) — a CPU has no per-request peak counter to reset.
"""

from __future__ import annotations

import sys
from typing import Any


def parameter_bytes(model: Any) -> int:
    if model is None:
        return 0
    return int(sum(p.numel() * p.element_size() for p in model.parameters()))


def cache_bytes(cache: Any) -> int:
    """Bytes held by a transformers Cache's key/value tensors (0 for None)."""
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and hasattr(tensor, "nbytes"):
                total += int(tensor.nbytes)
    return total


def draft_kv_bytes(engine: Any) -> int:
    proposer = getattr(engine, "proposer", None)
    lm = getattr(proposer, "lm", None)
    return cache_bytes(getattr(lm, "cache", None))


def reset_peak(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_gpu_bytes(device: Any) -> int | None:
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    return None


def rss_bytes() -> int | None:
    try:
        import psutil
    except ModuleNotFoundError:
        return None
    return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int | None:
    try:
        import resource
    except ModuleNotFoundError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB
