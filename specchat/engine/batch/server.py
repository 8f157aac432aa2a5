"""One batched engine serving requests that arrive while it runs (``specchat serve``): a
worker thread owns the BatchedEngine and runs ``generate`` over the RequestQueue ``submit``
fills; each request's Steps go to its own :class:`Handle`. A request that fails alone ends
alone; any other engine error ends every request in flight, and the worker starts over.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator

from specchat.engine.batch.requests import RequestQueue
from specchat.engine.batch.batched import BatchedEngine, Request
from specchat.errors import GenerationError, one_line
from specchat.events import Step


class Handle:
    """One submitted request: its Steps come from ``until``; ``cancel()`` from any thread."""

    def __init__(self, index: int, cancel: Callable[[int], None]) -> None:
        self.index = index
        self.steps: queue.Queue[Step | str] = queue.Queue()  # a str: the engine's error line
        self.finished = False
        self.stopped = False  # the client ended it (a stop string): its cancel finishes as "stop"
        self._cancel = cancel
        self._cancelled = False

    def until(self, gone: Callable[[], bool], every_s: float = 0.25) -> Iterator[Step]:
        """The steps (the last with its finish reason; GenerationError if the engine failed),
        asking ``gone()`` every ``every_s`` while none arrives: yes cancels the request."""
        while not self.finished:
            try:
                item = self.steps.get(timeout=every_s)
            except queue.Empty:
                if gone():
                    self.cancel()
                    return
                continue
            if isinstance(item, str):
                self.finished = True
                raise GenerationError(item)
            self.finished = item.finish_reason is not None
            yield item

    def cancel(self) -> None:
        if not self.finished and not self._cancelled:
            self._cancelled = True
            self._cancel(self.index)

    def stop(self) -> None:
        """Ends the request because its reply is complete (a stop string): cancelled, and
        its last step says "stop"."""
        self.stopped = True
        self.cancel()


class BatchedServer:
    """``submit(request) → Handle``; ``on_step(index, step)`` sees every Step in the
    worker thread (server-wide counters), whether or not its client still reads."""

    def __init__(self, engine: BatchedEngine, on_step: Callable[[int, Step], None] | None = None) -> None:
        self.engine = engine
        self.requests = RequestQueue()
        self._on_step = on_step or (lambda index, step: None)
        self._handles: dict[int, Handle] = {}
        self._errors: dict[int, str] = {}  # a request that failed alone → its line (worker thread only)
        self._lock = threading.Lock()  # a handle is registered before the worker can yield its first step
        self._worker = threading.Thread(target=self._run, name="specchat-batch", daemon=True)
        self._worker.start()

    def submit(self, request: Request) -> Handle:
        """ValueError for empty ids, or once the server is closed."""
        with self._lock:
            index = self.requests.put(request)
            handle = self._handles[index] = Handle(index, self.engine.cancel)
        return handle

    @property
    def running(self) -> int:
        """Requests submitted and not finished (waiting or decoding)."""
        with self._lock:
            return len(self._handles)

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancels what is in flight, stops the worker and frees the engine's context."""
        self.requests.close()
        with self._lock:
            for index in self._handles:
                self.engine.cancel(index)
        self._worker.join(timeout_s)
        if not self._worker.is_alive():
            self.engine.close()

    def _run(self) -> None:
        while not self.requests.finished:
            try:
                for index, step in self.engine.generate(self.requests, failed=self._failed):
                    with self._lock:
                        handle = self._handles.pop(index) if step.finish_reason else self._handles.get(index)
                    if handle is not None and handle.stopped and step.finish_reason == "cancelled":
                        step = dataclasses.replace(step, finish_reason="stop")
                    self._on_step(index, step)
                    line = self._errors.pop(index, None)  # set by _failed as the step failed
                    if handle is not None:
                        handle.steps.put(line if line is not None else step)
            except Exception as exc:  # the batch's cells are dropped (generate): fail its requests, go on
                self._errors.clear()
                line = one_line(exc)
                with self._lock:
                    self.requests.drain()
                    failed, self._handles = list(self._handles.values()), {}
                for handle in failed:
                    handle.steps.put(line)

    def _failed(self, index: int, exc: Exception) -> None:
        self._errors[index] = one_line(exc)
