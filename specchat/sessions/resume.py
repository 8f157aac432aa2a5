"""Rebuilding a conversation from its recording, as the plain ``[{"role", "content"}]`` history a
chat takes, to carry on where it stopped (loading the models: :func:`specchat.live.resume_loader`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from specchat.events import ChatReset, TurnFinished, UserMessage
from specchat.sessions.reader import Damage, read_recording


@dataclass
class Resumed:
    """``history`` for ChatSession; ``pending`` is the prompt of a turn that never got a
    reply (interrupted or failed) so the UI can put it back in the input box — nothing
    the user typed is lost; ``events`` the recorded events of that conversation (since its
    last reset), for the transcript to show before it goes on; ``damage`` is where the file stopped being readable."""

    history: list[dict[str, str]] = field(default_factory=list)
    pending: str | None = None
    events: list[Any] = field(default_factory=list)
    damage: Damage | None = None


def resume_from(path: str | os.PathLike[str]) -> Resumed:
    """The conversation as it stood at the end of the recording (after its last reset), as the
    turn loop keeps it: every finished turn, cancelled or failed too; a turn cut off by a crash
    gives its prompt as ``pending`` instead, so the history alternates user/assistant."""
    recording = read_recording(path)
    history: list[dict[str, str]] = []
    pending: str | None = None
    events: list[Any] = []
    for timed in recording.events:
        ev = timed.event
        events.append(ev)
        if isinstance(ev, ChatReset):
            history, pending, events = [], None, []
        elif isinstance(ev, UserMessage):
            pending = ev.text
        elif isinstance(ev, TurnFinished) and pending is not None:
            history.append({"role": "user", "content": pending})
            history.append({"role": "assistant", "content": ev.text})
            pending = None
    return Resumed(history, pending, events, recording.damage)

