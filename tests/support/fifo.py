"""A FIFO that a planted bug would read: a writer thread feeds it, so the bug's read ends
(with the wrong words) instead of blocking the test forever."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


@contextlib.contextmanager
def fed_fifo(path: Path, data: bytes):
    """Makes a FIFO at ``path`` and, while the block runs, writes ``data`` to each reader."""
    os.mkfifo(path)
    done = threading.Event()

    def writer():  # its open succeeds only once a reader has the FIFO open
        while not done.wait(0.05):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.write(fd, data)
            os.close(fd)

    threading.Thread(target=writer, daemon=True).start()
    try:
        yield path
    finally:
        done.set()
