"""Where the loaded models compute, and the share of the cores torch gets from that.

Read from what each backend declares (``computes_on``, ``uses_torch_threads``); a
transformers model not yet wrapped in its backend computes where its weights are.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from specchat.engine.backends.base import Backend

_torch_default_threads: int | None = None  # torch's own choice, before any profile changed it


def computes_on(model: Backend | torch.nn.Module) -> frozenset[str]:
    """The kinds of device doing ``model``'s arithmetic (see :class:`Backend`)."""
    if isinstance(model, Backend):
        return model.computes_on
    return frozenset({next(model.parameters()).device.type})


def _torch_on_cpu(model: Backend | torch.nn.Module) -> bool:
    uses_torch = model.uses_torch_threads if isinstance(model, Backend) else True
    return uses_torch and "cpu" in computes_on(model)


def share_cores(models: Iterable[Backend | torch.nn.Module | None]) -> int:
    """Sets torch's intra-op thread count for the models of this process; returns it.

    When llama.cpp computes on the CPU and no model computes there with torch, torch only
    samples over a few rows of logits between decodes: one thread does that as fast, and
    more would leave OpenMP workers spinning into llama.cpp's next decode, stealing its
    cores. Otherwise torch keeps its own default, restored if an earlier profile took it
    down (a CPU transformers model, a draft or the target, needs those threads)."""
    global _torch_default_threads
    if _torch_default_threads is None:
        _torch_default_threads = torch.get_num_threads()
    present = [m for m in models if m is not None]
    llama_on_cpu = any(not _torch_on_cpu(m) and "cpu" in computes_on(m) for m in present)
    threads = 1 if llama_on_cpu and not any(_torch_on_cpu(m) for m in present) else _torch_default_threads
    torch.set_num_threads(threads)
    return threads
