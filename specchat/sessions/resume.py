"""Rebuilding a conversation from its recording, to carry on chatting where it stopped.

Torch-free: the result is the plain ``[{"role", "content"}]`` list that
``ChatSession.history`` accepts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from specchat.events import ChatReset, TurnFinished, UserMessage
from specchat.sessions.reader import Damage, read_recording


@dataclass
class Resumed:
    """``history`` for ChatSession; ``pending`` is the prompt of a turn that never got a
    reply (interrupted or failed) so the UI can put it back in the input box — nothing
    the user typed is lost; ``damage`` is where the file stopped being readable."""

    history: list[dict[str, str]] = field(default_factory=list)
    pending: str | None = None
    damage: Damage | None = None
    profile_name: str = ""


def resume_from(path: str | os.PathLike[str]) -> Resumed:
    """The conversation as it stood at the end of the recording (after its last reset).

    Mirrors ``ChatSession.send``: every finished turn — cancelled or failed too — keeps
    the user's message and whatever was generated. A turn cut off by a crash (no
    TurnFinished) contributes its prompt as ``pending`` instead, so the history always
    alternates user/assistant.
    """
    recording = read_recording(path)
    history: list[dict[str, str]] = []
    pending: str | None = None
    for timed in recording.events:
        ev = timed.event
        if isinstance(ev, ChatReset):
            history, pending = [], None
        elif isinstance(ev, UserMessage):
            pending = ev.text
        elif isinstance(ev, TurnFinished) and pending is not None:
            history.append({"role": "user", "content": pending})
            history.append({"role": "assistant", "content": ev.text})
            pending = None
    return Resumed(history=history, pending=pending, damage=recording.damage, profile_name=recording.profile_name)


def resume_loader(path: str | os.PathLike[str], profile_ref: str | None = None, *, record: bool = True):
    """A UI loader (see ``specchat.ui.backend.Loader``) that loads the recording's
    profile (or ``profile_ref``), restores the conversation, and keeps recording into
    the same file — one conversation, one file. A damaged file is left as it is and
    the continuation goes to a new recording whose header names it (``resumed_from``).
    ``LoadedBackend.pending`` carries an unanswered prompt for the input box.
    """
    from specchat.sessions.locate import locate

    path = locate(str(path))
    resumed = resume_from(path)

    def load(ref: str | None, progress):
        from specchat.config import load_profile
        from specchat.sessions.reader import read_recording
        from specchat.sessions.recorder import Recorder, build_header
        from specchat.ui.backend import RecordingBackend, load_backend

        recording = read_recording(path)
        chosen = ref or profile_ref or _recorded_profile_ref(recording.header.profile)
        loaded = load_backend(chosen, progress, record=False)
        session = loaded.backend
        session.history = list(resumed.history)
        session.turn = max((t.event.turn for t in recording.events if isinstance(t.event, UserMessage)), default=0)
        profile = load_profile(chosen)
        if record and getattr(profile, "record", True):
            if recording.damage is None:
                recorder = Recorder(path)  # start() appends; the reader keeps this header aside
                header = build_header(profile, loaded.info.details)
            else:
                recorder = Recorder.for_profile(profile)
                header = build_header(profile, loaded.info.details, resumed_from=str(path))
            recorder.start(header)
            loaded.backend = RecordingBackend(session, recorder)
            loaded.info.recording = recorder.path
        loaded.pending = resumed.pending  # type: ignore[attr-defined]
        return loaded

    return load


def _recorded_profile_ref(profile: dict) -> str | None:
    """The profile file the session ran with if it still exists, else its name."""
    source = profile.get("source_path")
    if source and os.path.isfile(str(source)):
        return str(source)
    return profile.get("name") or None
