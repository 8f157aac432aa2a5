"""A recording as an asciinema v2 ``.cast`` file, tokens coloured by provenance.

Format (https://docs.asciinema.org/manual/asciicast/v2/): line 1 is a JSON header
``{"version": 2, "width", "height", "timestamp", "title", "env"}``; every further line
is ``[seconds, "o", text]`` with seconds non-decreasing. The terminal is in raw mode,
so newlines are written as CR LF. Torch-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

from specchat.sessions.ansi import banner, render
from specchat.sessions.reader import Recording, read_recording
from specchat.sessions.replay import IDLE_LIMIT_S, timed_events

WIDTH, HEIGHT = 100, 30


def cast_lines(recording: Recording, width: int = WIDTH, height: int = HEIGHT) -> Iterator[str]:
    """The .cast file, line by line (each a JSON document, no trailing newline)."""
    header = {
        "version": 2,
        "width": width,
        "height": height,
        "timestamp": int(recording.header_ts or 0),
        "title": f"specchat · {recording.profile_name} · {recording.header.created}",
        "env": {"TERM": "xterm-256color", "SHELL": "/bin/sh"},
    }
    yield json.dumps(header, ensure_ascii=False)
    yield json.dumps([0.0, "o", banner(recording)], ensure_ascii=False)
    for at, event in timed_events(recording, IDLE_LIMIT_S):
        data = render(event)
        if data:
            yield json.dumps([round(at, 6), "o", data], ensure_ascii=False)


def export_cast(source: Recording | str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    recording = source if isinstance(source, Recording) else read_recording(source)
    out = Path(out)
    out.write_text("\n".join(cast_lines(recording)) + "\n", encoding="utf-8")
    return out
