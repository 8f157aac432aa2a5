"""The terminal is given back even when the process dies hard (``abort()``, a segfault,
SIGKILL): a watcher process restores it unless told "released". Design notes: docs/design/ui.md
"""

from __future__ import annotations

import os
import subprocess
import sys
import termios
from typing import Any

# What Textual's Linux driver turns on, turned off in the order it turns them off:
# the kitty keyboard protocol, bracketed paste, in-band resize, mouse reporting
# (normal, any-event, urxvt, SGR, SGR pixels), focus events; line wrap back on, the
# main screen back, the cursor shown.
RESET = (b"\x1b[<u\x1b[?2004l\x1b[?2048l\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1016l"
         b"\x1b[?1004l\x1b[?7h\x1b[?1049l\x1b[?25h")
RELEASED = b"released"

# Runs with -I -S (no site, no user paths: ~15 ms to start, nothing of ours imported).
WATCHER = r"""
import ast, os, signal, sys, termios
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGTSTP", "SIGTTOU", "SIGPIPE"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
out, tty, attrs, reset = int(sys.argv[1]), int(sys.argv[2]), ast.literal_eval(sys.argv[3]), ast.literal_eval(sys.argv[4])
said = b""
while True:
    chunk = os.read(0, 64)
    if not chunk:
        break
    said += chunk
if said != b"released":
    try:
        if attrs is not None:
            termios.tcsetattr(tty, termios.TCSANOW, attrs)
    except (OSError, termios.error):
        pass
    try:
        os.write(out, reset)
    except OSError:
        pass
"""


class TerminalGuard:
    """The watcher of one app run; :meth:`release` once the app gave the terminal back."""

    def __init__(self, process: subprocess.Popen, pipe: int) -> None:
        self.process = process
        self._pipe = pipe

    def release(self) -> None:
        """The app exited and Textual restored the terminal: the watcher leaves it be."""
        if self._pipe < 0:
            return
        try:
            os.write(self._pipe, RELEASED)
        except OSError:
            pass
        os.close(self._pipe)
        self._pipe = -1


def guard_terminal(out_fd: int = 2, in_fd: int = 0) -> TerminalGuard | None:
    """Starts the watcher for a TUI that writes to ``out_fd`` (Textual writes to stderr)
    and reads keys from ``in_fd``; None where either is not a terminal (nothing to guard)
    or the watcher cannot start (the app runs as before)."""
    if not (os.isatty(out_fd) and os.isatty(in_fd)):
        return None
    try:
        attrs: Any = termios.tcgetattr(in_fd)
    except termios.error:
        attrs = None
    read_end, write_end = os.pipe()
    tty = os.dup(in_fd)  # the watcher's own stdin is the pipe
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", WATCHER, str(out_fd), str(tty), repr(attrs), repr(RESET)],
            stdin=read_end, stdout=subprocess.DEVNULL, pass_fds=(out_fd, tty), start_new_session=True)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
        os.close(tty)
    os.set_inheritable(write_end, False)
    return TerminalGuard(process, write_end)
