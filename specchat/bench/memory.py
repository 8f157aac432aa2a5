"""Memory figures for the benchmark (bytes): the draft's weights and KV cache, peak GPU
memory per request, and the resident set (a CPU has no per-request peak counter to reset)."""

from __future__ import annotations

import sys
from typing import Any


def draft_kv_bytes(engine: Any) -> int:
    proposer = getattr(engine, "proposer", None)
    lm = getattr(proposer, "lm", None)
    return lm.cache_bytes() if lm is not None else 0


def reset_peak(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_gpu_bytes(device: Any) -> int | None:
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    return None


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int | None:
    try:
        import resource
    except ModuleNotFoundError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB
