"""Wall-clock step timing, true on asynchronous devices without stalling them: on CUDA,
events read after the step's own single host sync (a clock read mid-step would need a sync
of its own); on the CPU, ``perf_counter``.
"""

from __future__ import annotations

import time

import torch


class StepTimer:
    """Marks inside one step; ``ms(a, b)`` is the time between marks a and b (on CUDA it
    waits for mark b: free after the step's own sync)."""

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
            self.marks[b].synchronize()
            return float(self.marks[a].elapsed_time(self.marks[b]))
        return (self.marks[b] - self.marks[a]) * 1000.0
