"""A recording as an asciinema v2 ``.cast`` file (https://docs.asciinema.org/manual/asciicast/v2/),
tokens coloured by provenance: a JSON header line, then ``[seconds, "o", text]`` frames.
"""

from __future__ import annotations

from specchat import sanitize
from specchat.sessions.ansi import banner, render
from specchat.sessions.reader import Recording
from specchat.sessions.replay import timed_events

WIDTH, HEIGHT = 100, 30


def cast_text(recording: Recording) -> str:
    """The .cast file: the header, then a frame a line."""
    header = {"version": 2, "width": WIDTH, "height": HEIGHT,
              "timestamp": int(recording.header_ts or 0),  # the reader checked it is finite
              "title": sanitize.clean_line("specchat ·", recording.profile_name, "·", recording.header.created),
              "env": {"TERM": "xterm-256color", "SHELL": "/bin/sh"}}
    # Frames hold sanitised text (render() cleans it) and our colours; inert_json also
    # keeps the file itself safe to `cat`.
    frames = [[0.0, "o", banner(recording)]]
    frames += [[round(at, 6), "o", text] for at, event in timed_events(recording) if (text := render(event))]
    return "\n".join(sanitize.inert_json(line) for line in [header, *frames]) + "\n"
