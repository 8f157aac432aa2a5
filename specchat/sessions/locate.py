"""Turning what the user typed after ``specchat replay`` into a recording path.

Accepts a path, a file name inside the sessions dir (with or without ``.jsonl``), or
``last`` for the newest recording — so ``specchat replay last`` just works.
"""

from __future__ import annotations

from pathlib import Path

from specchat.sessions.fileformat import SUFFIX, sessions_dir
from specchat.sessions.reader import RecordingError


def locate(ref: str) -> Path:
    path = Path(ref).expanduser()
    if path.is_file():
        return path
    directory = sessions_dir()
    if ref in ("last", "latest"):
        files = sorted(directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime) if directory.is_dir() else []
        if not files:
            raise RecordingError(f"no recorded sessions in {directory}", hint="chat with recording on first")
        return files[-1]
    for candidate in (directory / ref, directory / f"{ref}{SUFFIX}"):
        if candidate.is_file():
            return candidate
    what = ("a folder, not a recording" if path.is_dir() else "not a regular file (a FIFO or a device?)"
            if path.exists() else "no such recording")
    raise RecordingError(what, file=ref, hint=f"give a path, a name in {directory}, or 'last'")
