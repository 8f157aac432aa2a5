"""Reading a recording back: header, timed events, and where any damage starts. A damaged file
is no exception: everything up to the first bad line comes back, with :class:`Damage` saying
where and why (a recording cut by a crash is still worth replaying).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.events import ChatReset, ErrorEvent, SessionHeader, TurnFinished, TurnStarted, UserMessage, from_json
from specchat.sessions.fileformat import FORMAT_VERSION, RESERVED_KEYS
from specchat.sessions.validate import FieldError, check_record, check_timestamp

from specchat import untrusted
from specchat.errors import SpecchatError
from specchat.sanitize import clean, clean_line


class RecordingError(SpecchatError):
    """The file cannot be replayed at all (missing, empty, not a recording)."""


@dataclass(frozen=True)
class Damage:
    """Where a recording stops being readable. ``line`` is 1-based."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{clean_line(self.path)}, line {self.line}: {clean_line(self.reason)}"


@dataclass(frozen=True)
class TimedEvent:
    event: Any
    ts: float | None  # wall-clock seconds when it was recorded
    line: int


@dataclass
class Recording:
    path: Path
    header: SessionHeader
    header_ts: float | None
    events: list[TimedEvent] = field(default_factory=list)
    damage: Damage | None = None
    # Headers written after a profile switch (the new models' facts); kept out of
    # ``events`` because the UI consumes only chat events (ProfileSwitched marks the switch).
    later_headers: list[TimedEvent] = field(default_factory=list)

    @property
    def profile_name(self) -> str:
        return str(self.header.profile.get("name", "?"))

    @property
    def last_header(self) -> SessionHeader:
        """The header in force where the recording ends: the last profile switched to, or the first."""
        return self.later_headers[-1].event if self.later_headers else self.header


def _json_object(raw: str) -> dict[str, Any]:
    try:
        return untrusted.json_object(raw)
    except untrusted.TooDeep as exc:
        if exc.limit:  # it decodes: too deep for what reads it next (the sanitiser, the recorder)
            raise ValueError(str(exc)) from None
        raise ValueError(f"not valid JSON ({exc})") from None
    except untrusted.Unreadable as exc:
        where = f", column {exc.column}" if exc.column else ""
        raise ValueError(f"not valid JSON ({exc.reason}{where})" if exc.line else str(exc)) from None


def _check_header_line(data: dict[str, Any], number: int, path: Path) -> None:
    """The first line: its ``format`` is read before anything else (a newer specchat may
    have changed every other field, and must be named as the reason), then its type."""
    fmt = data.get("format")
    if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT_VERSION:
        raise RecordingError(f"written by a newer specchat (recording format {fmt}; this one reads format "
                             f"{FORMAT_VERSION})", file=str(path), hint="upgrade specchat to replay it")
    if fmt is not None and fmt != FORMAT_VERSION:
        raise FieldError(f"field 'format' must be {FORMAT_VERSION}, not {clean(str(fmt))[:40]!r}")
    if data.get("type") != "SessionHeader":
        kind = data.get("type")
        kind = f"a {kind}" if isinstance(kind, str) and kind.isidentifier() else repr(clean(str(kind))[:40])
        raise RecordingError(f"not a specchat recording: line {number} is {kind}, expected a SessionHeader",
                             file=str(path))


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Reads a whole recording. Raises :class:`RecordingError` only when nothing is
    replayable; otherwise returns what was readable and sets ``damage``."""
    path = Path(path)
    if not path.is_file():
        what = ("a folder, not a recording" if path.is_dir() else "not a regular file (a FIFO or a device?)"
            if path.exists() else "no such recording")
        raise RecordingError(what, file=str(path), hint="`specchat replay --list` lists recorded sessions")
    recording: Recording | None = None
    last_line = 0
    previous_ts: float | None = None
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        lines = list(f)  # bad UTF-8 becomes U+FFFD: a JSON or field problem on its line, not a failed read
    for number, raw in enumerate(lines, start=1):
        last_line = number
        text, complete = raw.rstrip("\n"), raw.endswith("\n")
        if not text.strip():
            continue  # a blank line harms nothing
        try:
            data = _json_object(text)
            if recording is None:
                _check_header_line(data, number, path)
            ts = check_timestamp(data.pop("ts", None), previous_ts)
            for key in RESERVED_KEYS:
                data.pop(key, None)
            check_record(data)  # FieldError (a ValueError) naming the bad field
            event = from_json(data)
        except ValueError as exc:  # nothing nested too deeply gets this far: the checks cannot recurse out
            reason = str(exc)
            if not complete:
                reason = f"the last line is cut short (the session was interrupted while writing it): {exc}"
            if recording is None:
                what = "is" if not isinstance(exc, FieldError) else "is the session header, but its"
                if not complete:  # the header's own line, cut short: say that, once
                    what, reason = "is cut short", f"(the session was interrupted while writing it): {exc}"
                raise RecordingError(f"not a specchat recording: line {number} {what} {reason}", file=str(path)) from None
            recording.damage = Damage(str(path), number, reason)
            return recording
        previous_ts = ts if ts is not None else previous_ts
        if recording is None:
            recording = Recording(path=path, header=event, header_ts=ts)
            continue
        if isinstance(event, SessionHeader):
            recording.later_headers.append(TimedEvent(event, ts, number))
        else:
            recording.events.append(TimedEvent(event, ts, number))
    if recording is None:
        raise RecordingError("empty recording: no session header", file=str(path))
    open_turn = _open_turn(recording.events)
    if open_turn is not None:
        recording.damage = Damage(str(path), last_line + 1,
                                  f"the recording ends in the middle of turn {open_turn} (the session was interrupted)")
    return recording


def _open_turn(events: list[TimedEvent]) -> int | None:
    """The turn left without a TurnFinished at the end of the file, if any."""
    open_turn = None
    for timed in events:
        ev = timed.event
        if isinstance(ev, (UserMessage, TurnStarted)):
            open_turn = ev.turn
        elif isinstance(ev, (TurnFinished, ChatReset)) or (isinstance(ev, ErrorEvent) and ev.turn is not None):
            open_turn = None  # a reset ends a turn left open (a cut one, carried into a new file), as the recorder does
    return open_turn
