"""What the UI talks to: a *backend* that turns user text into :mod:`specchat.events`.

The UI never imports torch; it sees only this protocol. Two kinds exist:

* a live chat (:class:`ChatBackend`) — the engine's ``ChatSession`` is one as it is;
  :func:`load_backend` builds it from a profile, importing the heavy modules lazily
  inside the loading worker thread;
* a self-playing source (:class:`EventSource`) — a recorded session replayed with its
  timing, which needs no model and no user input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

from specchat.events import ChatReset, LoadProgress

ProgressCallback = Callable[[LoadProgress], None]


@runtime_checkable
class ChatBackend(Protocol):
    """A live conversation. ``send`` yields UserMessage, TurnStarted, StepEvent…,
    TurnFinished (or ErrorEvent) and runs in a worker thread; ``cancel`` is called from
    the UI thread while ``send`` is running and must be thread-safe."""

    def send(self, text: str) -> Iterator[Any]: ...

    def cancel(self) -> None: ...

    def reset(self) -> None: ...

    def set_num_speculative_tokens(self, k: int | str) -> None: ...

    def set_temperature(self, temperature: float) -> None: ...

    def set_thinking(self, enabled: bool) -> None: ...


@runtime_checkable
class EventSource(Protocol):
    """Plays a whole session by itself (replay): ``events`` sleeps as recorded."""

    def events(self) -> Iterator[Any]: ...

    def cancel(self) -> None: ...


@dataclass
class BackendInfo:
    """What the UI shows and lets the user change about a loaded backend.

    ``thinking`` is None when the model has no thinking switch (only Qwen3-style chat
    templates that read ``enable_thinking`` have one). ``max_gamma`` bounds γ controls.
    """

    profile_name: str
    description: str = ""
    method: str = "none"
    num_speculative_tokens: int | str = 0
    max_gamma: int = 8
    temperature: float = 0.0
    thinking: bool | None = None
    profile_ref: str | None = None
    recording: Path | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadedBackend:
    backend: ChatBackend | EventSource
    info: BackendInfo

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if callable(close):
            close()


Loader = Callable[[str | None, ProgressCallback], LoadedBackend]


class RecordingBackend:
    """A ChatBackend that appends every event it yields to a session recording."""

    def __init__(self, inner: ChatBackend, recorder: Any) -> None:
        self.inner = inner
        self.recorder = recorder

    def send(self, text: str) -> Iterator[Any]:
        for event in self.inner.send(text):
            self.recorder.record(event)
            yield event

    def cancel(self) -> None:
        self.inner.cancel()

    def reset(self) -> None:
        self.inner.reset()
        self.recorder.record(ChatReset())

    def set_num_speculative_tokens(self, k: int | str) -> None:
        self.inner.set_num_speculative_tokens(k)

    def set_temperature(self, temperature: float) -> None:
        self.inner.set_temperature(temperature)

    def set_thinking(self, enabled: bool) -> None:
        self.inner.set_thinking(enabled)

    def close(self) -> None:
        self.recorder.close()

    def __getattr__(self, name: str) -> Any:
        # turn_metrics, session_metrics, history… come from the wrapped session.
        return getattr(self.inner, name)


def _template_has_thinking(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and "enable_thinking" in template


def load_backend(profile_ref: str | None, progress: ProgressCallback, *, record: bool = True) -> LoadedBackend:
    """Resolve a profile, load its models and build a ChatSession. Runs in a worker
    thread; raises :class:`specchat.errors.SpecchatError` (one line) on bad input."""
    from specchat.config import DEFAULT_PROFILE, load_profile
    from specchat.engine.factory import build_chat
    from specchat.loading import load_models

    profile = load_profile(profile_ref or DEFAULT_PROFILE)
    loaded = load_models(profile, progress=progress)
    session = build_chat(profile, loaded)
    spec = profile.speculation
    thinking: bool | None = None
    if _template_has_thinking(loaded.tokenizer):
        thinking = bool(profile.chat.enable_thinking) if profile.chat.enable_thinking is not None else True
    backend: ChatBackend = session
    recording = None
    if record and getattr(profile, "record", False):
        from specchat.sessions.recorder import Recorder, build_header

        recorder = Recorder.for_profile(profile)
        recorder.start(build_header(profile, loaded.info))
        backend = RecordingBackend(session, recorder)
        recording = recorder.path
    gamma = spec.num_speculative_tokens if spec.method != "none" else 0
    info = BackendInfo(
        profile_name=profile.name,
        description=profile.description or "",
        method=spec.method,
        num_speculative_tokens=gamma,
        max_gamma=int(spec.max_speculative_tokens or 8),
        temperature=float(profile.sampling.temperature),
        thinking=thinking,
        profile_ref=str(profile.source_path) if profile.source_path else profile_ref,
        recording=recording,
        details=dict(loaded.info or {}),
    )
    return LoadedBackend(session if recording is None else backend, info)


def replay_loader(path: str | Path, speed: float | str = 1.0) -> Loader:
    """A loader that opens a recording instead of loading models."""

    def load(_profile_ref: str | None, progress: ProgressCallback) -> LoadedBackend:
        from specchat.sessions.replay_backend import ReplayBackend  # helper C's adapter

        progress(LoadProgress(stage="replay", message=f"reading {path}"))
        source = ReplayBackend(path, speed=speed)
        name = getattr(source, "profile_name", None) or Path(path).stem
        return LoadedBackend(source, BackendInfo(profile_name=str(name), description=f"replay of {Path(path).name}", **source.backend_info()))

    return load
