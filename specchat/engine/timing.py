"""Wall-clock step timing that is true on asynchronous devices without stalling them.

On CUDA a step queues its work and the host runs ahead, so reading a clock mid-step
would need a device sync — a stall per timing point. :class:`StepTimer` instead records
CUDA events as it goes and reads them once, after the step's own single host sync
(the verdict's ``.tolist()``), when they are complete. On the CPU it reads
``perf_counter`` directly.
"""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device) -> None:
    """Waits for queued device work so wall-clock timings are true on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Wall-clock milliseconds with a device sync at each read (for once-a-turn work
    such as prefill, where a sync costs nothing that matters)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = time.perf_counter()

    def lap(self) -> float:
        synchronize(self.device)
        now = time.perf_counter()
        ms = (now - self.start) * 1000.0
        self.start = now
        return ms


class StepTimer:
    """Marks inside one step; ``ms(a, b)`` is the time between marks a and b, valid once
    the step has synchronised with the device (the caller's one ``.tolist()``)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.mark()

    def mark(self) -> int:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())
        return len(self.marks) - 1

    def ms(self, a: int, b: int) -> float:
        if self.cuda:
            self.marks[b].synchronize()  # already complete after the step's sync: no stall
            return float(self.marks[a].elapsed_time(self.marks[b]))
        return (self.marks[b] - self.marks[a]) * 1000.0
