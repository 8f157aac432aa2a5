"""The list of past sessions for the history screen and ``specchat replay --list``.

Pure data, torch-free. Each file is read in full (recordings are small: ~1 KB per step)
but a damaged or foreign file never hides the others: it is listed with its problem.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from specchat.events import StepEvent, UserMessage
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
    path = Path(path)
    try:
        recording = read_recording(path)
    except (RecordingError, OSError) as exc:
        mtime = _dt.datetime.fromtimestamp(path.stat().st_mtime) if path.exists() else None
        return SessionSummary(
            path, mtime.isoformat(sep=" ", timespec="minutes") if mtime else "?", "?", "", 0, 0, None, str(exc)
        )
    first = next((t.event.text for t in recording.events if isinstance(t.event, UserMessage)), "")
    turns = sum(1 for t in recording.events if isinstance(t.event, UserMessage))
    tokens = sum(len(t.event.step.tokens) for t in recording.events if isinstance(t.event, StepEvent))
    metrics = rebuild_metrics(recording)
    created = recording.header.created
    try:
        date = _dt.datetime.fromisoformat(created).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        date = created or "?"
    return SessionSummary(
        path=path,
        date=date,
        profile=recording.profile_name,
        first_prompt=" ".join(first.split()),
        turns=turns,
        tokens=tokens,
        mean_acceptance_length=metrics.mean_acceptance_length if metrics.num_drafts else None,
        problem=str(recording.damage.reason) if recording.damage else None,
    )


def list_sessions(directory: str | os.PathLike[str] | None = None) -> list[SessionSummary]:
    """Every recording in ``directory`` (default: the user's sessions dir), newest first."""
    directory = Path(directory) if directory is not None else sessions_dir()
    if not directory.is_dir():
        return []
    files = sorted(directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [summarize(p) for p in files]
