"""A recording as an asciinema v2 ``.cast`` file, tokens coloured by provenance.

Format (https://docs.asciinema.org/manual/asciicast/v2/): line 1 is a JSON header
``{"version": 2, "width", "height", "timestamp", "title", "env"}``; every further line
is ``[seconds, "o", text]`` with seconds non-decreasing. The terminal is in raw mode,
so newlines are written as CR LF. Torch-free.
"""

from __future__ import annotations

from typing import Iterator

from specchat import sanitize
from specchat.sessions.ansi import banner, render
from specchat.sessions.reader import Recording
from specchat.sessions.replay import IDLE_LIMIT_S, timed_events

WIDTH, HEIGHT = 100, 30


def cast_lines(recording: Recording, width: int = WIDTH, height: int = HEIGHT) -> Iterator[str]:
    """The .cast file, line by line (each a JSON document, no trailing newline)."""
    header = {
        "version": 2,
        "width": width,
        "height": height,
        "timestamp": int(recording.header_ts or 0),  # the reader checked it is finite
        "title": sanitize.clean_line("specchat ·", recording.profile_name, "·", recording.header.created),
        "env": {"TERM": "xterm-256color", "SHELL": "/bin/sh"},
    }
    # Frames hold sanitised text (render() cleans it) and our colours; inert_json also
    # keeps the file itself safe to `cat`.
    yield sanitize.inert_json(header)
    yield sanitize.inert_json([0.0, "o", banner(recording)])
    for at, event in timed_events(recording, IDLE_LIMIT_S):
        data = render(event)
        if data:
            yield sanitize.inert_json([round(at, 6), "o", data])


def cast_text(recording: Recording) -> str:
    return "\n".join(cast_lines(recording)) + "\n"

