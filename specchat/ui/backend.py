"""What the UI talks to: a *backend* that turns user text into :mod:`specchat.events`, built in
the app's loading worker by a :data:`Loader` (:mod:`specchat.live`'s). A live chat
(:class:`ChatBackend`) or a source that plays by itself (:class:`EventSource`, a replay), as it
declares (``can_send``); either folds its own steps, and the UI shows its snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from specchat.events import LoadProgress
from specchat.telemetry import MetricsSnapshot

ProgressCallback = Callable[[LoadProgress], None]


class ChatBackend(Protocol):
    """A live conversation. ``send`` yields UserMessage, TurnStarted, StepEvent…,
    TurnFinished (or ErrorEvent) and runs in a worker thread; ``cancel`` is called from
    the UI thread while ``send`` is running and must be thread-safe. ``close`` releases
    what it holds (a recording file) when the app lets it go. The metrics are this turn's
    and the session's figures from the source's own fold (read on the worker thread)."""

    can_send: bool  # True: it takes the user's messages
    turn_metrics: MetricsSnapshot
    session_metrics: MetricsSnapshot

    def send(self, text: str) -> Iterator[Any]: ...

    def cancel(self) -> None: ...

    def reset(self) -> None: ...

    def set_num_speculative_tokens(self, k: int | str) -> None: ...

    def set_temperature(self, temperature: float) -> None: ...

    def set_thinking(self, enabled: bool) -> None: ...

    def close(self) -> None: ...


class EventSource(Protocol):
    """Plays a whole session by itself (replay): ``events`` sleeps as recorded."""

    can_send: bool  # False: it takes no messages
    turn_metrics: MetricsSnapshot
    session_metrics: MetricsSnapshot

    def events(self) -> Iterator[Any]: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class BackendInfo:
    """What the UI shows and lets the user change about a loaded backend. ``thinking``: None
    without a thinking switch (Qwen3-style templates have one); ``warning``: shown once, when
    the backend is installed (e.g. the sessions dir is read-only)."""

    profile_name: str
    description: str = ""
    method: str = "none"
    num_speculative_tokens: int | str = 0
    max_gamma: int = 8
    temperature: float = 0.0
    thinking: bool | None = None
    recording: Path | None = None
    details: dict[str, Any] = field(default_factory=dict)
    warning: str | None = None
    # a model runs its steps on this machine's CPU, whose cores the UI shares: the UI then
    # draws between the steps (step_gate.py); not a server's, a GPU's or a replay's
    computes_on_cpu: bool = False

    @property
    def target_dtype(self) -> str | None:
        """The dtype the target computes in ("bfloat16", "4bit-nf4/bfloat16"), for the header."""
        target = self.details.get("target")
        if not isinstance(target, dict) or not target.get("dtype"):
            return None
        quant = target.get("quantization", "none")
        return target["dtype"] if quant in (None, "none") else f"{quant}/{target['dtype']}"


@dataclass
class LoadedBackend:
    """``pending``: a prompt that never got its reply (a reopened session), which the
    app puts back in the input box; ``earlier``: a reopened session's recorded events
    (since its last new chat), which the transcript shows before the chat goes on."""

    backend: ChatBackend | EventSource
    info: BackendInfo
    pending: str | None = None
    earlier: tuple[Any, ...] = ()

    @property
    def can_send(self) -> bool:
        """A live chat (True) or a source that plays by itself (False), as declared."""
        return self.backend.can_send

    def close(self) -> None:
        self.backend.close()


Loader = Callable[[str | None, ProgressCallback], LoadedBackend]


def replay_loader(path: str | Path, speed: float | str = 1.0) -> Loader:
    """A loader that opens a recording instead of loading models."""

    def load(_profile_ref: str | None, progress: ProgressCallback) -> LoadedBackend:
        from specchat.sessions.replay_backend import ReplayBackend

        progress(LoadProgress(stage="replay", message=f"reading {path}"))
        source = ReplayBackend(path, speed=speed)
        name = source.recording.profile_name or Path(path).stem
        return LoadedBackend(source, BackendInfo(profile_name=str(name), description=f"replay of {Path(path).name}", **source.backend_info()))

    return load
