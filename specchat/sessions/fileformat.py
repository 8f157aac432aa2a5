"""The on-disk shape of a recording, shared by the recorder and the reader.

A recording is JSON Lines, UTF-8, one event per line::

    {"type": "SessionHeader", ..., "format": 1, "ts": 1764412800.123}
    {"type": "UserMessage", "turn": 1, "text": "hi", "ts": 1764412801.5}
    ...

Each line is ``specchat.events.to_json(event)`` plus two reserved keys that no event
field uses: ``ts`` (wall-clock seconds since the epoch when the event was written) and,
on the header only, ``format`` (this module's :data:`FORMAT_VERSION`). Keeping the
event keys at top level (rather than nesting under ``"event"``) keeps recordings
readable with ``grep`` and ``jq``.
"""

from __future__ import annotations

from pathlib import Path

from specchat.paths import data_dir

FORMAT_VERSION = 1
SUFFIX = ".jsonl"
RESERVED_KEYS = ("ts", "format")


def sessions_dir() -> Path:
    """Where recordings live: ``<user data dir>/sessions``.

    ``SPECCHAT_DATA_DIR`` overrides the platform's data dir (tests use it)."""
    base = data_dir()
    return base / "sessions"
