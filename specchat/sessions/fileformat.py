"""The on-disk shape of a recording, shared by the recorder and the reader.

A recording is JSON Lines, UTF-8, one event per line: ``specchat.events.to_json(event)``
at top level (readable with ``grep`` and ``jq``) plus two reserved keys no event field
uses: ``ts`` (wall-clock seconds since the epoch when written) and, on the header only,
``format`` (:data:`FORMAT_VERSION`). For example
``{"type": "UserMessage", "turn": 1, "text": "hi", "ts": 1764412801.5}``.
"""

from __future__ import annotations

from pathlib import Path

from specchat.paths import data_dir

FORMAT_VERSION = 1
SUFFIX = ".jsonl"
RESERVED_KEYS = ("ts", "format")


def sessions_dir() -> Path:
    """``<user data dir>/sessions`` (``SPECCHAT_DATA_DIR`` overrides the data dir)."""
    return data_dir() / "sessions"
