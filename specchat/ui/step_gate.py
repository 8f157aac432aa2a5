"""Lets the UI draw between the model's steps, not in the middle of one.

On a small CPU the model keeps every core busy: llama.cpp and torch split each step
over one thread per core, and the threads meet at barriers many times a step. A UI
thread that wakes mid-step takes a core from one of them, and the others spin at the
next barrier until it is back: a millisecond of drawing then costs about a millisecond
of *every* core. Between two steps no core is computing, so there the same drawing
costs only itself.

The worker runs the backend's event generator through :meth:`StepGate.steps` (each
``next`` computes one step); the UI wraps its drains and paints in
:meth:`StepGate.drawing`. A UI section waits for the step in progress to end (a few
ms; at most ``wait_s``, so a long prompt's prefill never freezes the screen), and the
next step starts once no UI section is waiting or running. Where steps take longer
than ``wait_s`` (a large model on a CPU), waiting would only make the screen lag, so
the UI draws at once, as it would without the gate. Nothing is dropped or reordered:
the gate only decides *when* each side runs.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

# The longest a UI section waits for the model's step to end before drawing anyway:
# beyond a step's length on our CPU (7-25 ms for the default model), short enough that a
# prefill of seconds does not stall the screen or the keyboard. Where the last steps'
# median is longer, the UI does not wait at all.
WAIT_S = 0.05


class StepGate:
    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._stepping = False
        self._drawing = 0  # UI sections waiting or running
        self._recent: deque[float] = deque(maxlen=16)  # the last steps' durations (s)
        self.overlapped = 0  # UI sections that ran during a step (long steps, or waited in vain)

    def steps(self, events: Iterable[T]) -> Iterator[T]:
        """``events``, each computed while no UI section runs (worker side)."""
        iterator = iter(events)
        while True:
            with self._cond:
                while self._drawing:
                    self._cond.wait()
                self._stepping = True
            start = time.perf_counter()
            try:
                event = next(iterator)
            except StopIteration:
                return
            finally:
                with self._cond:
                    self._stepping = False
                    self._recent.append(time.perf_counter() - start)
                    self._cond.notify_all()
            yield event

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """A UI section: it starts once the step in progress ends (or ``wait_s`` passed),
        and the next step waits for it (UI side)."""
        with self._cond:
            self._drawing += 1
            long_steps = len(self._recent) >= 3 and statistics.median(self._recent) > self.wait_s
            if self._stepping and (long_steps or not self._cond.wait_for(lambda: not self._stepping,
                                                                         timeout=self.wait_s)):
                self.overlapped += 1
        try:
            yield
        finally:
            with self._cond:
                self._drawing -= 1
                self._cond.notify_all()
