"""Signals end the turn, not the process mid-write (``run``, ``demo --headless``): Ctrl+C, SIGTERM
and SIGHUP cancel the reply, recorded "cancelled" as Esc does in the TUI; the command then exits
with 128 + the signal's number. A second signal exits at once.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class Caught:
    """The first signal caught (None until one is), and its exit code."""

    signum: int | None = None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)


@contextmanager
def signals_cancel(cancel: Callable[[], None]) -> Iterator[Caught]:
    """Within the block, the signals above call ``cancel`` (thread-safe in every chat
    backend) instead of killing the process; only in the main thread."""
    caught = Caught()

    def handler(signum, frame) -> None:
        if caught.signum is not None:  # asked twice: no more waiting
            raise SystemExit(caught.exit_code)
        caught.signum = signum
        cancel()

    previous = {}
    try:
        for name in SIGNALS:
            if hasattr(signal, name):
                previous[getattr(signal, name)] = signal.signal(getattr(signal, name), handler)
    except ValueError:  # not the main thread: leave the signals alone
        pass
    try:
        yield caught
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
