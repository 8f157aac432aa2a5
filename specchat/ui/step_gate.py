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
next step starts once no UI section is waiting or running. Nothing is dropped or
reordered: the gate only decides *when* each side runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

# The longest a UI section waits for the model's step to end before drawing anyway:
# beyond a step's length (7-25 ms here), short enough that a prefill of seconds does
# not stall the screen or the keyboard.
WAIT_S = 0.05


class StepGate:
    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._stepping = False
        self._drawing = 0  # UI sections waiting or running
        self.overlapped = 0  # UI sections that ran during a step (waited wait_s in vain)

    def steps(self, events: Iterable[T]) -> Iterator[T]:
        """``events``, each computed while no UI section runs (worker side)."""
        iterator = iter(events)
        while True:
            with self._cond:
                while self._drawing:
                    self._cond.wait()
                self._stepping = True
            try:
                event = next(iterator)
            except StopIteration:
                return
            finally:
                with self._cond:
                    self._stepping = False
                    self._cond.notify_all()
            yield event

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """A UI section: it starts once the step in progress ends (or ``wait_s`` passed),
        and the next step waits for it (UI side)."""
        with self._cond:
            self._drawing += 1
            if not self._cond.wait_for(lambda: not self._stepping, timeout=self.wait_s):
                self.overlapped += 1
        try:
            yield
        finally:
            with self._cond:
                self._drawing -= 1
                self._cond.notify_all()
