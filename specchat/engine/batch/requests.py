"""Where the batched engine takes its requests from: a queue that may grow while it runs (a
server's, open until closed), or one closed at once (a list of requests: bench, tests).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from specchat.engine.sampling import SamplingParams


@dataclass
class Request:
    """One reply to decode: its prompt's ids, how to sample, when to stop."""

    ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()


class RequestQueue:
    """Requests numbered in the order they were put (the index ``generate`` yields)."""

    def __init__(self, requests: Iterable[Request] = (), closed: bool = False) -> None:
        self._waiting: deque[tuple[int, Request]] = deque()
        self._ready = threading.Condition()
        self._count = 0
        self._closed = False
        for request in requests:
            self.put(request)
        self._closed = closed

    def put(self, request: Request) -> int:
        """Adds ``request`` → its index. ValueError for empty ids or a closed queue."""
        if not request.ids:
            raise ValueError("a request's ids are empty: give at least one token")
        with self._ready:
            if self._closed:
                raise ValueError("the request queue is closed")
            index, self._count = self._count, self._count + 1
            self._waiting.append((index, request))
            self._ready.notify()
        return index

    def close(self) -> None:
        """No more requests: ``generate`` ends once those waiting and active are done."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def take(self, wait_s: float = 0.0) -> tuple[int, Request] | None:
        """The next waiting request, waiting up to ``wait_s`` seconds for one (0: none)."""
        with self._ready:
            if not self._waiting and not self._closed and wait_s > 0:
                self._ready.wait(wait_s)
            return self._waiting.popleft() if self._waiting else None

    def withdraw(self, indices: set[int]) -> list[int]:
        """Takes those of ``indices`` still waiting (cancelled before a slot freed) → them."""
        with self._ready:
            gone = [i for i, _ in self._waiting if i in indices]
            if gone:
                self._waiting = deque((i, r) for i, r in self._waiting if i not in indices)
            return gone

    def drain(self) -> list[tuple[int, Request]]:
        """Every waiting request, taken (a server failing them after an engine error)."""
        with self._ready:
            taken, self._waiting = list(self._waiting), deque()
            return taken

    @property
    def finished(self) -> bool:
        """Closed with nothing waiting: nothing more will come."""
        with self._ready:
            return self._closed and not self._waiting
