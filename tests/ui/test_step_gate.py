"""The UI draws between the model's steps, never in the middle of one (specchat.ui.step_gate).

Units on real threads, then the app: a live tiny model in the TUI driven by Pilot, its
every step and every drain and paint of the chat screen timed, none overlapping.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from textual.screen import Screen

from specchat.live import LiveLoader
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.step_gate import StepGate
from tests.support.pilot import SIZE, wait_for
from tests.support.tiny_models import build_tiny_model, write_tiny_profile


class Clock:
    """(start, end) of each step and each UI section, on one clock."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, float]] = []
        self.sections: list[tuple[float, float]] = []

    def timed_steps(self, events, step_s: float = 0.0):
        """``events``, each step (computing it, then ``step_s`` more) timed."""
        iterator = iter(events)
        while True:
            start = time.perf_counter()
            try:
                event = next(iterator)
            except StopIteration:
                return
            time.sleep(step_s)
            self.steps.append((start, time.perf_counter()))
            yield event


def overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple]:
    return [(x, y) for x in a for y in b if x[0] < y[1] and y[0] < x[1]]


def section_wait(gate: StepGate) -> float:
    """How long a UI section waited to start (s)."""
    start = time.perf_counter()
    with gate.drawing():
        return time.perf_counter() - start


def run_worker(gate: StepGate, events) -> tuple[threading.Thread, list]:
    return run_worker_with(gate, events, lambda event: True)


def run_worker_with(gate: StepGate, events, is_step) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(gate.steps(events, is_step)))
    thread.start()
    return thread, out


def test_a_ui_section_waits_for_the_step_in_progress_and_the_next_step_for_it():
    gate, clock = StepGate(wait_s=5.0), Clock()
    thread, out = run_worker(gate, clock.timed_steps(range(12), 0.02))
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        with gate.drawing():
            start = time.perf_counter()
            time.sleep(0.005)
            clock.sections.append((start, time.perf_counter()))
        time.sleep(0.002)  # the UI's loop between two sections (Textual's timers)
    thread.join()
    assert out == list(range(12))
    assert len(clock.sections) >= 3, "the UI never got a turn between the steps"
    assert not overlaps(clock.steps, clock.sections)
    assert gate.overlapped == 0


def test_a_long_step_holds_the_ui_back_no_longer_than_wait_s():
    """A prefill of seconds must not freeze the screen or the keyboard: past wait_s the
    UI draws anyway, and says so in ``overlapped``."""
    gate = StepGate(wait_s=0.05)
    thread, _ = run_worker(gate, Clock().timed_steps([1], 1.0))
    while not gate._stepping:
        time.sleep(0.001)
    waited = section_wait(gate)  # until wait_s after the step began, then it draws
    thread.join()
    assert 0.03 <= waited < 0.2
    assert gate.overlapped == 1


def test_where_steps_outlast_wait_s_the_ui_draws_at_once():
    """A large model on a CPU (steps of 150 ms here): waiting would only make the screen
    lag behind the keyboard, so once the steps have shown their length the UI stops
    waiting for them."""
    gate = StepGate(wait_s=0.05)
    thread, _ = run_worker(gate, Clock().timed_steps(range(6), 0.15))
    while len(gate._recent) < 3 or not gate._stepping:  # the fourth step has just begun
        time.sleep(0.001)
    waited = section_wait(gate)
    thread.join()
    assert waited < 0.02 and gate.overlapped == 1


def test_events_pass_in_order_and_a_failed_step_releases_the_gate():
    def failing():
        yield "a"
        yield "b"
        raise RuntimeError("the backend failed")

    gate = StepGate(wait_s=5.0)
    seen = []
    with pytest.raises(RuntimeError, match="the backend failed"):
        for event in gate.steps(failing()):
            seen.append(event)
    assert seen == ["a", "b"]
    assert section_wait(gate) < 0.5 and gate.overlapped == 0  # no step in progress: no wait
    assert list(gate.steps(iter(()))) == []


def test_the_tui_never_drains_or_paints_during_a_step(tmp_path, _tiny_tokenizer, monkeypatch):
    """A live model streaming through the app: every step of the turn (each ``next`` of
    the backend's events, timed inside the worker) and every drain and paint of the chat
    screen (timed where they run), pairwise disjoint. A wider tiny target (~10 ms a step)
    gives the UI many steps to land in."""
    slow_dir = build_tiny_model(tmp_path / "slow", seed=0, num_layers=6, hidden=256, tokenizer=_tiny_tokenizer)
    profile = write_tiny_profile(tmp_path / "slow.toml", slow_dir, method="ngram", temperature=1.0,
                                 max_new_tokens=150, seed=1)
    clock = Clock()

    def timed(name, method):
        def wrapper(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                if isinstance(self, ChatScreen) or name == "drain":
                    clock.sections.append((start, time.perf_counter()))
        return wrapper

    monkeypatch.setattr(Screen, "_compositor_refresh", timed("paint", Screen._compositor_refresh))
    monkeypatch.setattr(Screen, "_refresh_layout", timed("layout", Screen._refresh_layout))
    monkeypatch.setattr(ChatScreen, "apply_events", timed("drain", ChatScreen.apply_events))

    async def run():
        app = SpecchatApp(str(profile), loader=LiveLoader(record=False))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.loaded is not None and app.loading is None, what="the profile")
            app.gate.wait_s = 5.0  # a first step's warm-up may pass 50 ms; the bound is tested above
            backend = app.loaded.backend
            send = backend.send
            backend.send = lambda text: clock.timed_steps(send(text))
            clock.sections.clear()
            app.chat.input.text = "tell me a story"
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.turns_ended == 1, 60, "the turn")
            reply = app.chat.transcript.last_reply
            return app.gate.overlapped, len(reply.tokens)

    overlapped, tokens = asyncio.run(run())
    first, last = clock.steps[0][0], clock.steps[-1][1]
    during = [s for s in clock.sections if first < s[1] and s[0] < last]
    assert tokens >= 50 and len(clock.steps) >= 20
    assert len(during) >= 3, "the screen was not drawn while the reply streamed"
    assert overlapped == 0
    assert not overlaps(clock.steps, during)


def test_only_the_models_steps_teach_the_gate_their_length():
    """A turn's instant events (its message, its start, its end) are not steps: counted
    as steps of 0 ms they would pull the median down, and a large model's short replies
    would keep the UI waiting 50 ms at every paint."""
    gate = StepGate(wait_s=0.05)

    def turn():
        yield "message"
        for _ in range(3):
            time.sleep(0.12)
            yield "step"
        yield "finished"

    thread, _ = run_worker_with(gate, turn(), lambda event: event == "step")
    thread.join()
    assert len(gate._recent) == 3 and min(gate._recent) >= 0.1


def test_a_section_waits_from_the_steps_start_not_its_own():
    """A step already past wait_s (a prefill) is drawn over at once, not after another
    wait_s at every paint."""
    gate = StepGate(wait_s=0.05)
    thread, _ = run_worker(gate, Clock().timed_steps([1], 0.6))
    time.sleep(0.2)
    waited = section_wait(gate)
    thread.join()
    assert waited < 0.02 and gate.overlapped == 1


def test_a_consumer_that_stops_early_ends_the_backends_generator():
    closed = []

    def backend():
        try:
            yield from range(10)
        finally:
            closed.append(True)

    inner = backend()  # still referenced here, as the worker's frame holds it
    steps = StepGate().steps(inner)
    assert next(steps) == 0
    steps.close()
    assert closed == [True]
