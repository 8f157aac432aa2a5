"""Crash-safe session recording: every event appended to a JSON Lines file as it happens, one
``write`` per line, fsynced only where a turn ends (why: docs/design/sessions.md)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from specchat import __version__
from specchat.errors import SpecchatError
from specchat.events import (ChatReset, ProfileSwitched, SessionHeader, StepEvent, TurnFinished, TurnStarted, UserMessage,
                             to_json)
from specchat.redact import redact_url
from specchat.sanitize import inert_json
from specchat.sessions.fileformat import FORMAT_VERSION, SUFFIX, sessions_dir
from specchat.sessions.private_files import create_private, private_dir, write_all
from specchat.turn import closed_at_quit

# LoadedModels.info keys that describe the software rather than the models.
ENVIRONMENT_KEYS = ("torch", "transformers", "python", "platform", "cuda", "bitsandbytes")

# Events after which the file is fsynced (see the module docstring for why not every event).
_SYNC_AFTER = (TurnFinished, ChatReset, ProfileSwitched, SessionHeader)


def _jsonable(value: Any) -> Any:
    """Profiles and info dicts hold Paths, tuples and nested dataclasses; make them JSON.
    A URL's user info (a server's password or token) is never recorded."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return str(value)


def build_header(profile: Any, info: dict[str, Any] | None = None, **environment: Any) -> SessionHeader:
    """A SessionHeader from the resolved profile and ``LoadedModels.info``, split into model facts
    and environment facts (:data:`ENVIRONMENT_KEYS`, ``*_version``, Python, the platform, and
    ``environment`` such as ``resumed_from``)."""
    import platform
    import sys

    info = _jsonable(info or {})
    is_env = lambda k: k in ENVIRONMENT_KEYS or k.endswith("_version")  # noqa: E731
    models = {k: v for k, v in info.items() if not is_env(k)}
    env = {k: v for k, v in info.items() if is_env(k)}
    env.setdefault("python", sys.version.split()[0])
    env.setdefault("platform", platform.platform(terse=True))
    env.update(_jsonable(environment))
    return SessionHeader(__version__, _jsonable(profile) if profile is not None else {}, models, env,
                         _dt.datetime.now().astimezone().isoformat(timespec="seconds"))


def _candidates(profile_name: str, directory: Path) -> Iterator[Path]:
    """``<dir>/YYYY-MM-DDTHH-MM-SS_<profile>.jsonl``, then ``…-2.jsonl``, ``…-3.jsonl``…"""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", profile_name).strip("-")[:40] or "session"
    base = f"{_dt.datetime.now().strftime('%Y-%m-%dT%H-%M-%S')}_{slug}"
    yield directory / f"{base}{SUFFIX}"
    for n in itertools.count(2):
        yield directory / f"{base}-{n}{SUFFIX}"


class RecordingBusy(SpecchatError):
    """Another specchat is writing the recording this one wanted to carry on."""


class Recorder:
    """Appends events to one recording, one flushed line each; thread-safe. ``Recorder(None)``
    does nothing (no ``if`` needed); the others, and what a failed write does: docs/design/sessions.md."""

    def __init__(self, path: str | os.PathLike[str] | None, *, _new_in: tuple[Path, str] | None = None,
                 _append_after: float | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._new_in = _new_in  # (directory, profile name): the file is named at start()
        self._append = _append_after is not None
        self._last_ts = _append_after or 0.0  # timestamps never go back, even across a resume
        self._fd: int | None = None
        self._size = 0  # bytes of complete lines in the file
        self._lock = threading.Lock()
        self._open_turn: tuple[int, float, list[str]] | None = None  # (turn, time.time() at its start, reply pieces)
        self.events_written = 0
        self.failure: str | None = None
        self._failure_taken = False

    @classmethod
    def for_profile(cls, profile: Any, *, enabled: bool = True, directory: Path | None = None) -> Recorder:
        """A recorder for a new session of ``profile``: disabled when ``enabled`` is
        False (``--no-record``) or the profile says ``record = false``."""
        if not enabled or not getattr(profile, "record", True):
            return cls(None)
        directory = Path(directory) if directory is not None else sessions_dir()
        return cls(None, _new_in=(directory, str(getattr(profile, "name", "session"))))

    @classmethod
    def append_to(cls, path: str | os.PathLike[str], *, after: float | None = None) -> Recorder:
        """Carries on the recording at ``path``; its lines are stamped no earlier than
        ``after`` (the file's last timestamp). :meth:`start` raises RecordingBusy if
        another process has it open."""
        return cls(path, _append_after=after or 0.0)

    @property
    def enabled(self) -> bool:
        return self.path is not None or self._new_in is not None

    def start(self, header: SessionHeader) -> None:
        """Creates (or, for :meth:`append_to`, opens) the file and writes the header."""
        if not self.enabled:
            return
        try:
            self._fd = self._open_existing() if self._append else self._create()
        except OSError as exc:  # RecordingBusy (another process has the file) is not one: it goes up
            where = self.path or self._new_in[0]  # type: ignore[index]
            self.failure = f"not recording: cannot create a recording in {where} ({exc.strerror or exc})"
            return
        self.record(header, format=FORMAT_VERSION)

    def _create(self) -> int:
        if self.path is not None:  # a path of the caller's choosing: its folder is theirs
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return _locked(create_private(self.path), self.path)
        directory, name = self._new_in  # type: ignore[misc]
        private_dir(directory)
        for path in _candidates(name, directory):
            try:
                fd = create_private(path)
            except FileExistsError:  # another chat started this second: the next name
                continue
            self.path = path
            return _locked(fd, path)
        raise AssertionError("unreachable")

    def _open_existing(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))  # type: ignore[arg-type]
        self._size = os.fstat(fd).st_size
        return _locked(fd, self.path)  # type: ignore[arg-type]

    def record(self, event: Any, **extra: Any) -> None:
        """Appends one event (any :mod:`specchat.events` dataclass), ``extra`` keys beside its fields."""
        with self._lock:
            self._write_locked(event, extra)

    def _write_locked(self, event: Any, extra: dict[str, Any]) -> None:
        if self._fd is None:  # disabled, failed or closed
            return
        data = to_json(event)
        data.update(extra)
        self._last_ts = max(time.time(), self._last_ts)
        data["ts"] = round(self._last_ts, 6)
        # One write of one complete line: a kill mid-write leaves at most a partial
        # last line. inert_json: `cat` and `grep` on a recording stay safe too.
        line = (inert_json(data, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            self._write_bytes(line)
            if isinstance(event, _SYNC_AFTER):
                os.fsync(self._fd)
        except OSError as exc:
            self._stop(exc)
            return
        self._size += len(line)
        self.events_written += 1
        self._follow_turn(event)

    def _follow_turn(self, event: Any) -> None:
        """Keeps the open turn's reply as written, for :meth:`close`."""
        if isinstance(event, (UserMessage, TurnStarted)):
            if self._open_turn is None or self._open_turn[0] != event.turn:
                self._open_turn = (event.turn, time.time(), [])
        elif isinstance(event, StepEvent) and self._open_turn is not None:
            self._open_turn[2].extend(token.text for token in event.step.tokens)
        elif isinstance(event, (TurnFinished, ChatReset)):  # a reset ends a turn left open (a cut one, carried)
            self._open_turn = None

    def _write_bytes(self, data: bytes) -> None:
        write_all(self._fd, data)  # type: ignore[arg-type]

    def _stop(self, exc: OSError) -> None:
        """After a failed write: drop its partial line, keep the rest, stop recording."""
        fd, self._fd = self._fd, None
        self.failure = (f"recording stopped: cannot write {self.path} ({exc.strerror or exc}); "
                        f"the chat goes on unrecorded, {self.events_written} events kept")
        for step in (lambda: os.ftruncate(fd, self._size), lambda: os.close(fd)):
            try:
                step()
            except OSError:
                pass

    def take_failure(self) -> str | None:
        """Why recording stopped — once (for one warning), then None."""
        with self._lock:
            if self.failure is None or self._failure_taken:
                return None
            self._failure_taken = True
            return self.failure

    def switch_profile(self, header: SessionHeader) -> None:
        """The chat goes on with another profile: a ProfileSwitched event, then the new
        models' header, in the same file (readers keep later headers aside)."""
        self.record(ProfileSwitched(str(header.profile.get("name", "?"))))
        self.record(header)

    def close(self) -> None:
        """Closes a turn left open (as "cancelled"), syncs and closes the file; a new file
        that got nothing but its header is removed."""
        with self._lock:
            if self._open_turn is not None:
                turn, started, pieces = self._open_turn
                self._write_locked(closed_at_quit(turn, "".join(pieces), time.time() - started), {})
            fd, self._fd = self._fd, None
            if fd is None:
                return
            try:
                os.fsync(fd)
            except OSError:
                pass
            os.close(fd)
            if not self._append and self.events_written <= 1 and self.path is not None:
                self.path.unlink(missing_ok=True)
                self.path = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _locked(fd: int, path: Path) -> int:
    """``fd`` holding an exclusive lock on its file (where the OS has flock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: O_EXCL alone keeps new files apart
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RecordingBusy("another specchat is writing this recording", file=str(path),
                            hint="carry it on when that chat has ended") from None
    return fd
