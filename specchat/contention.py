"""How much of the machine other processes took while we decoded (:class:`CpuShare`).
Design notes: docs/design/speedup.md
"""

from __future__ import annotations

import time
from typing import Callable

# Other processes using more than this share of all cores during the timed steps make
# the timings unreliable: on two cores, a quarter is one core busy half the time.
BUSY_SHARE = 0.25

Reading = tuple[float, float, float]  # (all CPUs' busy seconds, own CPU seconds, wall seconds)


def read_machine() -> Reading:
    import psutil

    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    busy = sum(times) - idle - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return busy, time.process_time(), time.perf_counter()


class CpuShare:
    """``take()`` → the share of all cores other processes used since the last reading
    (None on the first call, or where it cannot be read); read at most every ``every`` seconds
    (why: docs/design/speedup.md). ``read`` and ``cpus`` are injectable (tests fake a load)."""

    def __init__(self, read: Callable[[], Reading] | None = None, cpus: int | None = None,
                 every: float | None = None) -> None:
        if cpus is None:
            import os

            cpus = os.cpu_count() or 1
        self.read, self.cpus = read or read_machine, cpus
        self.every = (0.25 if read is None else 0.0) if every is None else every
        self._last: Reading | None = None
        self._share: float | None = None
        self._read_at = float("-inf")

    def take(self, fresh: bool = False) -> float | None:
        """``fresh``: read now whatever the interval (a turn's or a benchmark row's start,
        where the share before it says nothing of what follows)."""
        if not fresh and self.every and time.perf_counter() - self._read_at < self.every:
            return self._share
        self._share = self._measure()
        self._read_at = time.perf_counter()
        return self._share

    def _measure(self) -> float | None:
        try:
            now = self.read()
        except Exception:  # no psutil support here: the share is unknown, never invented
            return None
        last, self._last = self._last, now
        if last is None:
            return None
        wall = now[2] - last[2]
        if wall <= 0:
            return None
        others = (now[0] - last[0]) - (now[1] - last[1])
        return min(1.0, max(0.0, others / (wall * self.cpus)))
