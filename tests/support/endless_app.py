"""The real specchat TUI on an endless fake model, for the quit tests in a real pty.

``python tests/support/endless_app.py chat|stall|demo|loading`` runs :func:`specchat.ui.app.run_app`
— the CLI's entry point — with a recorded backend whose replies never end on their own
(a token every 20 ms until cancelled), so a quit always lands mid-reply; no torch.
``stall``: from the fourth step on, a step takes a minute and cannot be cancelled (a long
prompt's first pass, a big model's step). ``loading``: a model load that takes a minute
and cannot be cancelled.
"""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace

from specchat.events import Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted, UserMessage
from specchat.sessions.demo import ScriptedBackend, parse_script
from specchat.sessions.recorder import Recorder, build_header
from specchat.sessions.recording_backend import RecordingBackend
from specchat.telemetry import MetricsSnapshot
from specchat.ui.app import run_app
from specchat.ui.backend import BackendInfo, LoadedBackend

DEMO = "short reply\n\n/pause 30\n\nsecond prompt, never sent\n"


class EndlessChat:
    """A ChatBackend like the engine's ChatSession: one token per step, stopping only
    when cancelled (or after 5 steps for a prompt starting with "short")."""

    can_send = True

    def __init__(self, stall_after: int | None = None) -> None:
        self.stall_after = stall_after
        self._cancel = threading.Event()
        self.turn = 0

    def send(self, text: str):
        self._cancel.clear()
        self.turn += 1
        turn, started, pieces, finish = self.turn, time.monotonic(), [], "length"
        yield UserMessage(turn, text)
        yield TurnStarted(turn, 5, 0)
        for i in range(5 if text.startswith("short") else 10**9):
            if self._cancel.is_set():
                finish = "cancelled"
                break
            time.sleep(60 if self.stall_after is not None and i >= self.stall_after else 0.02)
            pieces.append(f"w{i} ")
            step = Step((Token(i, "target", p=0.5, text=pieces[-1]),), StepStats(0, 0, 0, verify_ms=20.0, total_ms=20.0))
            yield StepEvent(turn, step, time.monotonic() - started)
        yield TurnFinished(turn, finish, "".join(pieces), {}, time.monotonic() - started)

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        pass

    def set_num_speculative_tokens(self, k) -> None:
        pass

    def set_temperature(self, temperature: float) -> None:
        pass

    def set_thinking(self, enabled: bool) -> None:
        pass

    def close(self) -> None:
        pass

    turn_metrics = session_metrics = MetricsSnapshot()


def main(mode: str) -> int:
    recorder = Recorder.for_profile(SimpleNamespace(name="endless", record=True))
    recorder.start(build_header({"name": "endless"}))
    backend = RecordingBackend(EndlessChat(stall_after=3 if mode == "stall" else None), recorder)
    source = ScriptedBackend(backend, parse_script(DEMO)) if mode == "demo" else backend
    info = BackendInfo(profile_name="endless", recording=recorder.path)

    def load(ref, progress) -> LoadedBackend:
        if mode == "loading":
            time.sleep(60)
        return LoadedBackend(source, info)

    return run_app("endless", loader=load)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
