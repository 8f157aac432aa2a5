"""Quitting cleanly: Ctrl+Q, Ctrl+C, SIGINT, SIGTERM and SIGHUP all end the app the same way,
never waiting on a model. A mixin of :class:`specchat.ui.app.SpecchatApp`; design notes:
docs/design/ui.md. A hard death still gets its terminal back: :mod:`specchat.ui.terminal_guard`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from typing import Any

# How long the engine worker may take to record how its turn ended (a step is
# milliseconds to a few hundred on a CPU) before the app exits anyway.
QUIT_GRACE_S = 0.5
# Exit codes for a quit by signal: 128 + the signal's number, as a shell reports it.
QUIT_SIGNALS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


class Quitting:
    def init_quitting(self) -> None:
        # Set while no worker of that kind runs: a quit waits (briefly) for the engine's.
        self._engine_idle = threading.Event()
        self._engine_idle.set()
        self._load_idle = threading.Event()
        self._load_idle.set()
        self._stopping = False

    def quit_on_signals(self) -> None:
        """SIGINT, SIGTERM and SIGHUP quit like Ctrl+Q (real terminals only: a test's
        headless app leaves the process's signals alone)."""
        loop = asyncio.get_running_loop()
        for name, code in QUIT_SIGNALS.items():
            if hasattr(signal, name):
                try:
                    loop.add_signal_handler(getattr(signal, name), self.call_later, self.stop, code)
                except (NotImplementedError, RuntimeError, ValueError):  # no signals here (Windows)
                    pass

    async def action_quit(self) -> None:
        await self.stop()

    async def action_help_quit(self) -> None:
        """Ctrl+C quits as SIGINT does (the README's key table). Textual binds it to a
        "press ctrl+q" toast instead, since a terminal in raw mode sends it as a key, not
        a signal; a focused text box with a selection still copies it first."""
        await self.stop(QUIT_SIGNALS["SIGINT"])

    async def stop(self, code: int = 0) -> None:
        """Quits with exit code ``code``; a second request exits at once."""
        if self._stopping:
            self.exit(return_code=code)
            return
        self._stopping = True
        for loaded in (self.loaded, self._pending):
            if loaded is not None:
                loaded.backend.cancel()
        deadline = time.monotonic() + QUIT_GRACE_S
        while not self._engine_idle.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.exit(return_code=code)

    @property
    def workers_busy(self) -> bool:
        """True while a model is loading or a turn's (or a replay's) worker still runs."""
        return not (self._engine_idle.is_set() and self._load_idle.is_set())


def run_to_exit(app: Any) -> None:
    """Runs ``app`` on a loop of our own, so that returning does not wait for the
    worker threads (``asyncio.run`` would join its executor); then, if a worker is
    still busy, ends the process at once (see the module docstring)."""
    from specchat.ui.terminal_guard import guard_terminal

    guard = guard_terminal()  # puts the terminal back if the process dies under the app
    loop = asyncio.new_event_loop()
    app.run(loop=loop)
    if guard is not None:  # Textual gave the terminal back itself
        guard.release()
    if app.workers_busy:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(app.return_code or 0)
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
