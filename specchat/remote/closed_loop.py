"""N clients sharing one queue of jobs, closed loop: a client takes the next job when its
last one is done. Used by the remote bench (one chat a client) and by llama-server's
concurrent peer rows (one stream a client)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


def closed_loop(jobs: list, workers: list, work: Callable[[Any, int, Any], None]) -> None:
    """Serves ``jobs`` in order, ``work(worker, i, job)`` for each, one client per entry of
    ``workers``; a single worker runs in this thread (where Ctrl-C lands). The first
    failure stops the clients from taking more jobs and is re-raised here."""
    todo: queue.Queue = queue.Queue()
    for item in enumerate(jobs):
        todo.put(item)
    failed: list[BaseException] = []

    def client(worker: Any) -> None:
        while not failed:
            try:
                i, job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                work(worker, i, job)
            except BaseException as exc:  # noqa: BLE001 — re-raised in the caller's thread
                failed.append(exc)

    if len(workers) == 1:
        client(workers[0])
    else:
        threads = [threading.Thread(target=client, args=(w,), daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failed:
        raise failed[0]
