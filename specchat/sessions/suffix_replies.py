"""The replies of earlier recordings, as token ids: what the suffix store is built from
when it is missing or was damaged (engine/proposers/suffix_store_open.py). Torch-free."""

from __future__ import annotations

from typing import Iterator

from specchat.errors import SpecchatError
from specchat.events import ProfileSwitched, StepEvent, TurnFinished, TurnStarted
from specchat.sessions.fileformat import SUFFIX, sessions_dir
from specchat.sessions.reader import read_recording

MAX_RECORDINGS = 200  # the newest recordings a rebuild reads


def recorded_replies(model_source: str) -> Iterator[list[int]]:
    """Reply ids of the recordings made with ``model_source`` as target, oldest first
    (the newest MAX_RECORDINGS recordings; unreadable ones are skipped)."""
    try:
        files = sorted(sessions_dir().glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime)[-MAX_RECORDINGS:]
    except OSError:
        return
    for file in files:
        try:
            recording = read_recording(file)
        except (SpecchatError, OSError):
            continue
        target = recording.header.profile.get("target")
        if not isinstance(target, dict) or target.get("source") != model_source:
            continue
        reply: list[int] = []
        for timed in recording.events:
            event = timed.event
            if isinstance(event, ProfileSwitched):
                break  # what follows came from another profile's models
            if isinstance(event, TurnStarted):
                reply = []
            elif isinstance(event, StepEvent):
                reply.extend(token.id for token in event.step.tokens)
            elif isinstance(event, TurnFinished) and reply:
                yield reply
                reply = []
