"""The composition root for live chats: profile → models → ChatSession → recording, joined into
the UI's backend protocol here so that neither ``specchat.ui`` nor ``specchat.engine`` reaches
into the other. Heavy imports happen inside the functions.
"""

from __future__ import annotations

import os
from typing import Any

from specchat.ui.backend import BackendInfo, LoadedBackend, Loader, ProgressCallback


def quiet_transformers() -> None:
    """No progress bars or info lines from transformers / huggingface_hub on stderr: they would
    garble a Textual screen while a model loads (LoadProgress feeds the status line instead)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    disable_progress_bars()


def _build(profile_ref: Any, progress: ProgressCallback, record: bool):
    """(profile, LoadedModels, ChatSession, BackendInfo) for a profile name or path, or
    a :class:`~specchat.config.Profile` already built (a recording's, on resume);
    ``record``: whether this chat is recorded (one that is not keeps nothing in the suffix store)."""
    from specchat.config import DEFAULT_PROFILE, Profile, load_profile
    from specchat.remote import is_remote

    profile = profile_ref if isinstance(profile_ref, Profile) else load_profile(profile_ref or DEFAULT_PROFILE)
    if is_remote(profile):  # the server runs the model: no torch here
        return _build_remote(profile, progress)
    from specchat.engine.factory import build_chat
    from specchat.engine.gamma.calibrate import calibrate
    from specchat.events import LoadProgress
    from specchat.loading import load_models
    from specchat.sessions.suffix_replies import recorded_replies

    models = load_models(profile, progress=progress)
    session = build_chat(profile, models, recorded_replies, record=record)
    calibrate(session.engine, session.sampling, lambda text: progress(LoadProgress("timing", 0, 0, text)))
    spec = profile.speculation
    thinking: bool | None = None
    template = getattr(models.tokenizer, "chat_template", None) or ""
    if isinstance(template, str) and "enable_thinking" in template:  # Qwen3-style: the others have no switch
        thinking = bool(profile.chat.enable_thinking) if profile.chat.enable_thinking is not None else True
    info = BackendInfo(profile_name=profile.name, description=profile.description or "", method=spec.method,
                       num_speculative_tokens=spec.num_speculative_tokens if spec.method != "none" else 0,
                       max_gamma=int(spec.max_speculative_tokens or 8), temperature=float(profile.sampling.temperature),
                       thinking=thinking, details=dict(models.info or {}),
                       # declared by the backends; llama.cpp with some layers offloaded still computes on the CPU
                       computes_on_cpu="cpu" in models.computes_on)
    return profile, models, session, info


def _build_remote(profile: Any, progress: ProgressCallback):
    """The same four things for a server that speculates itself: no models load here;
    ``models.info`` describes the server (no key: the profile names only its variable)."""
    from types import SimpleNamespace

    from specchat.remote import open_chat, server_fields

    session, server = open_chat(profile, progress)
    models = SimpleNamespace(info=server, tokenizer=None)
    fields = server_fields(server)
    warning = f"{server.get('url')}: the server reports no speculation — every token is a plain target token"
    info = BackendInfo(profile_name=profile.name, description=profile.description or "",
                       temperature=float(profile.sampling.temperature),
                       warning=None if fields["method"] != "none" else warning, **fields)
    return profile, models, session, info


def load_backend(profile_ref: str | None, progress: ProgressCallback, *, record: bool = True) -> LoadedBackend:
    """One live chat on a profile, recorded to a new file when ``record`` and the
    profile's ``record`` key allow. Raises SpecchatError (one line) on bad input."""
    return LiveLoader(record=record)(profile_ref, progress)


class LiveLoader:
    """The TUI's loader: each call loads a profile. Later calls (profile switches) keep
    the conversation — its history and its recording file — going with the new models."""

    def __init__(self, *, record: bool = True, quiet: bool = False) -> None:
        self.record = record
        self.quiet = quiet
        self.current: Any = None  # the last RecordingBackend handed out

    def __call__(self, profile_ref: str | None, progress: ProgressCallback) -> LoadedBackend:
        from specchat.sessions.recorder import Recorder, build_header
        from specchat.sessions.recording_backend import RecordingBackend

        if self.quiet:
            quiet_transformers()
        previous = self.current
        if previous is not None and not previous.closed:  # the new models carry on its recording, or its lack of one
            record = previous.recorder.enabled
        else:
            record = self.record
        profile, models, session, info = _build(profile_ref, progress, record)
        if previous is not None and not previous.closed:  # closed: replaced by a replay
            header = build_header(profile, models.info)
            backend = RecordingBackend(session, previous.recorder, takes_over=(previous, header))
        else:
            recorder = Recorder.for_profile(profile, enabled=self.record)
            recorder.start(build_header(profile, models.info))
            backend = RecordingBackend(session, recorder)
        info.recording = backend.recorder.path
        info.warning = backend.recorder.take_failure()
        self.current = backend
        return LoadedBackend(backend, info)


def resume_loader(path: str | os.PathLike[str], profile_ref: str | None = None, *, record: bool = True,
                  quiet: bool = False, trust_remote_code: bool = False,
                  trust_recorded_server: bool = False) -> Loader:
    """A loader that reopens a recorded conversation, history restored and recording on into the
    same file (a damaged or busy one is left as is: a new recording names it, ``resumed_from``).
    The profile is ``profile_ref``, or the recording's as data (config/recorded.py). The
    recording and its profile are checked here, before any model loads (SpecchatError)."""
    from specchat.config import load_profile
    from specchat.config.recorded import profile_from_recording
    from specchat.sessions.locate import locate
    from specchat.sessions.reader import read_recording
    from specchat.sessions.resume import resume_from

    path = locate(str(path))
    resumed = resume_from(path)  # a bad file fails here, before any model loads
    recording = read_recording(path)
    if profile_ref is not None:
        chosen = load_profile(profile_ref)
    else:
        chosen = profile_from_recording(recording.last_header.profile, str(path), trust_remote_code=trust_remote_code,
                                        trust_server=trust_recorded_server)
    loader = LiveLoader(record=False, quiet=quiet)

    def load(ref: str | None, progress: ProgressCallback) -> LoadedBackend:
        from specchat.events import UserMessage
        from specchat.sessions.recorder import Recorder, RecordingBusy, build_header
        from specchat.sessions.recording_backend import RecordingBackend

        if loader.current is not None:  # a profile switch after the resume: same conversation
            return loader(ref, progress)
        if quiet:
            quiet_transformers()
        profile, models, session, info = _build(ref or chosen, progress, record)
        session.history = list(resumed.history)
        session.turn = max((t.event.turn for t in recording.events if isinstance(t.event, UserMessage)), default=0)
        recorder, moved = Recorder(None), None
        if record and getattr(profile, "record", True):
            recorder = None
            moved = f"{path.name} was cut short: {recording.damage.reason}" if recording.damage else None
            if recording.damage is None:
                last = max((t.ts for t in recording.events + recording.later_headers if t.ts is not None),
                           default=recording.header_ts)
                try:
                    recorder = Recorder.append_to(path, after=last)  # the reader keeps this header aside
                    recorder.start(build_header(profile, models.info))
                except RecordingBusy:
                    recorder, moved = None, f"another specchat is writing {path.name}"
            if recorder is None:
                recorder = Recorder.for_profile(profile)
                recorder.start(build_header(profile, models.info, resumed_from=str(path)))
        backend = RecordingBackend(session, recorder, carries=tuple(resumed.events) if moved else ())
        loader.current = backend
        info.recording = recorder.path
        info.warning = recorder.take_failure() or (
            f"{moved}; it is left as it is, and this chat goes on in a new recording, {recorder.path.name}"
            if moved and recorder.path is not None else None)
        return LoadedBackend(backend, info, pending=resumed.pending, earlier=tuple(resumed.events))

    return load
