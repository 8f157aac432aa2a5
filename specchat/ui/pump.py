"""Hands events from worker threads to the UI without flooding its message queue: they are made
inert here, in the worker, buffered, and at most one pending :class:`EventsReady` wakes the UI,
which takes the whole buffer. No event is dropped; only the wake-ups coalesce.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from textual.message import Message
from textual.message_pump import MessagePump

from specchat.sanitize import clean_data


class EventsReady(Message):
    """Wake-up: the pump has events to drain."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EventsReady)


class EventPump:
    def __init__(self, target: MessagePump) -> None:
        self._target = target
        self._queue: deque[tuple[float, Any]] = deque()
        self._lock = threading.Lock()
        self._signalled = False
        self.urgent = False  # whether an urgent marker waits in the buffer

    def put(self, event: Any) -> None:
        """A backend's event, cleaned (see the module docstring). Thread-safe."""
        self._put(clean_data(event), urgent=False)

    def put_marker(self, marker: Any, urgent: bool = True) -> None:
        """The app's own marker between events, as it is (no text in it to clean). An
        urgent one (a turn or a load ended) makes the next drain come at once, not at the
        next interval; figures are not urgent. Thread-safe."""
        self._put(marker, urgent=urgent)

    def hand_over(self, event: Any, feed: Any) -> None:
        """A source's event (worker side), with its figures when due (``feed``: a
        figures.FigureFeed): the source folded the step already, so its snapshots are read
        here, on the thread that drives it, never from the UI thread."""
        self.put(event)
        figures = feed.after(event)
        if figures is not None:
            self.put_marker(figures, urgent=False)

    def _put(self, item: Any, urgent: bool) -> None:
        with self._lock:
            self._queue.append((time.perf_counter(), item))
            self.urgent = self.urgent or urgent
            if self._signalled and not urgent:
                return
            self._signalled = True
        self._target.post_message(EventsReady())

    def drain(self) -> list[tuple[float, Any]]:
        """Everything buffered, oldest first, with the time each was put (perf_counter s)."""
        with self._lock:
            self._signalled = self.urgent = False
            items = list(self._queue)
            self._queue.clear()
        return items
