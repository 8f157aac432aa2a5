"""The share of the cores torch gets, from where the loaded models compute (as each
backend declares: ``computes_on``, ``uses_torch_threads``)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from specchat.engine.backends.base import Backend

_torch_default_threads: int | None = None  # torch's own choice, before any profile changed it


def share_cores(backends: Iterable[Backend | None]) -> int:
    """Sets torch's intra-op thread count for the models of this process; returns it. One
    where llama.cpp computes on the CPU and torch only samples (more would leave OpenMP
    workers spinning into llama.cpp's next decode), else torch's own default."""
    global _torch_default_threads
    if _torch_default_threads is None:
        _torch_default_threads = torch.get_num_threads()
    on_cpu = [b for b in backends if b is not None and "cpu" in b.computes_on]
    torch_on_cpu = any(b.uses_torch_threads for b in on_cpu)
    threads = 1 if on_cpu and not torch_on_cpu else _torch_default_threads
    torch.set_num_threads(threads)
    return threads
