"""Lets the UI draw between the model's steps, not in the middle of one: the worker runs the
event generator through :meth:`StepGate.steps`, the UI wraps drains and paints in
:meth:`StepGate.drawing`. Nothing is dropped or reordered. Design notes: docs/design/ui.md
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

# How long after a step began a UI section stops waiting for it and draws anyway:
# beyond a step's length on our CPU (7-25 ms for the default model), short enough that a
# prefill of seconds does not stall the screen or the keyboard. Where the last steps'
# median is longer, the UI does not wait at all.
WAIT_S = 0.05

# The longest the model's next step waits for a UI section: a backstop only (sections
# take milliseconds), so that no fault on the UI's side can stop the model for good.
WORKER_WAIT_S = 1.0


class StepGate:
    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._stepping = False  # one worker steps at a time (the app's engine group is exclusive)
        self._started = 0.0  # when the step in progress began (perf_counter s)
        self._drawing = 0  # UI sections waiting or running
        self._recent: deque[float] = deque(maxlen=16)  # the last steps' durations (s)
        self.overlapped = 0  # UI sections that ran during a step (long steps, or waited in vain)

    def steps(self, events: Iterable[T], is_step: Callable[[T], bool] = lambda event: True) -> Iterator[T]:
        """``events``, each computed while no UI section runs (worker side). The events
        for which ``is_step`` holds are the model's steps: their durations decide whether
        the UI waits (not the instant ones, such as a turn's first and last events)."""
        iterator = iter(events)
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: not self._drawing, timeout=WORKER_WAIT_S)
                    self._stepping, self._started = True, time.perf_counter()
                computed = False
                try:
                    event = next(iterator)
                    computed = True
                except StopIteration:
                    return
                finally:
                    with self._cond:
                        self._stepping = False
                        if computed and is_step(event):
                            self._recent.append(time.perf_counter() - self._started)
                        self._cond.notify_all()
                yield event
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # the consumer stopped early: the backend's generator ends now
                close()

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """A UI section: it starts once the step in progress ends (or ``wait_s`` after it
        began), and the next step waits for it (UI side)."""
        with self._cond:
            self._drawing += 1
            try:
                if self._stepping:
                    left = self.wait_s - (time.perf_counter() - self._started)
                    long_steps = len(self._recent) >= 3 and statistics.median(self._recent) > self.wait_s
                    if long_steps or left <= 0 or not self._cond.wait_for(lambda: not self._stepping, timeout=left):
                        self.overlapped += 1
            except BaseException:
                self._drawing -= 1
                self._cond.notify_all()
                raise
        try:
            yield
        finally:
            with self._cond:
                self._drawing -= 1
                self._cond.notify_all()
