"""A live chat that records itself: every event it yields is appended to a recording.

Design notes (a conversation carried to a new file, profile switches, a recorder that
fails): docs/design/sessions.md
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from specchat.events import ChatReset, Notice, SessionHeader


class RecordingBackend:
    """A ChatBackend that appends every event it yields to ``recorder``."""

    can_send = True

    def __init__(self, inner: Any, recorder: Any, *, takes_over: tuple[RecordingBackend, SessionHeader] | None = None,
                 carries: tuple[Any, ...] = ()) -> None:
        self.inner = inner
        self.recorder = recorder
        self._takes_over = takes_over
        self._carries = tuple(carries)
        self._lock = threading.Lock()
        self.closed = False
        # Whoever owns the recorder closes it; ownership moves to a successor as soon as
        # it is built, so closing the replaced backend leaves the shared file open.
        self._owner = [self]
        if takes_over is not None:
            self._owner = takes_over[0]._owner
            self._owner[0] = self
            self._carries = takes_over[0]._take_carries() + self._carries  # not yet written: ours to write

    def _take_carries(self) -> tuple[Any, ...]:
        with self._lock:
            carries, self._carries = self._carries, ()
        return carries

    def _activate(self) -> None:
        with self._lock:
            takes_over, self._takes_over = self._takes_over, None
        for event in self._take_carries():
            self.recorder.record(event)
        if takes_over is None:
            return
        previous, header = takes_over
        self.recorder.switch_profile(header)
        history = getattr(previous.inner, "history", None)
        if history:
            self.inner.history = list(history)
            self.inner.turn = getattr(previous.inner, "turn", 0)

    def send(self, text: str) -> Iterator[Any]:
        self._activate()
        yield from self._notice()
        for event in self.inner.send(text):
            self.recorder.record(event)
            yield event
            yield from self._notice()

    def _notice(self) -> Iterator[Notice]:
        failure = self.recorder.take_failure()
        if failure:
            yield Notice(failure)

    def reset(self) -> None:
        self._activate()
        self.inner.reset()
        self.recorder.record(ChatReset())

    def close(self) -> None:
        self.closed = True
        if self._owner[0] is self:
            with self._lock:
                switched = self._takes_over is not None
            if switched:  # a switch with no message after it is still the profile the chat ends on (--resume)
                self._activate()
            self.recorder.close()

    def __getattr__(self, name: str) -> Any:
        # The rest of ChatBackend (cancel, the settings, the metrics of its turn loop's
        # fold) and history, telemetry… come from the wrapped session.
        return getattr(self.inner, name)
