"""The list of past sessions for the history screen and ``specchat replay --list``. Each file is
read in full (~1 KB a step); a damaged or foreign one is listed with its problem, never hides the rest.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from specchat.events import StepEvent, UserMessage
from specchat.sanitize import clean_line
from specchat.sessions.fileformat import SUFFIX, sessions_dir
from specchat.sessions.reader import RecordingError, read_recording
from specchat.sessions.replay import rebuild_metrics


@dataclass(frozen=True)
class SessionSummary:
    """One row of the history screen. ``tokens`` counts generated tokens;
    ``mean_acceptance_length`` is None for a session that never drafted; ``problem``
    says why a file is damaged or unreadable (None when it is whole)."""

    path: Path
    date: str
    profile: str
    first_prompt: str
    turns: int
    tokens: int
    mean_acceptance_length: float | None
    problem: str | None = None

    @property
    def replayable(self) -> bool:
        return self.turns > 0 or self.problem is None


def summarize(path: str | os.PathLike[str]) -> SessionSummary:
    """One row; never raises — whatever is wrong with the file becomes its ``problem``."""
    path = Path(path)
    try:
        return _summarize(path)
    except (RecordingError, OSError) as exc:
        problem = str(exc)
    except Exception as exc:  # noqa: BLE001 - one bad file must never hide the others
        problem = f"{path}: unreadable ({type(exc).__name__}: {exc})"
    try:
        mtime = _dt.datetime.fromtimestamp(path.stat().st_mtime).isoformat(sep=" ", timespec="minutes")
    except OSError:
        mtime = "?"
    return SessionSummary(path, mtime, "?", "", 0, 0, None, problem)


def _summarize(path: Path) -> SessionSummary:
    recording = read_recording(path)
    first = next((t.event.text for t in recording.events if isinstance(t.event, UserMessage)), "")
    turns = sum(1 for t in recording.events if isinstance(t.event, UserMessage))
    tokens = sum(len(t.event.step.tokens) for t in recording.events if isinstance(t.event, StepEvent))
    metrics = rebuild_metrics(recording)
    created = recording.header.created
    try:
        date = _dt.datetime.fromisoformat(created).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        date = clean_line(created)[:20] or "?"
    return SessionSummary(path, date, recording.profile_name, clean_line(first), turns, tokens,
                          metrics.mean_acceptance_length, str(recording.damage.reason) if recording.damage else None)


def list_sessions(directory: str | os.PathLike[str] | None = None) -> list[SessionSummary]:
    """Every recording in ``directory`` (default: the user's sessions dir), newest first."""
    directory = Path(directory) if directory is not None else sessions_dir()
    if not directory.is_dir():
        return []
    files = sorted(directory.glob(f"*{SUFFIX}"), key=_mtime, reverse=True)
    return [summarize(p) for p in files]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile, or a dangling link: listed last, with its problem
        return 0.0
