"""Wall-clock step timing that is true on asynchronous devices."""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device) -> None:
    """Waits for queued device work so wall-clock timings are true on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
