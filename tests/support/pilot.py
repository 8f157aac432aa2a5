"""Helpers shared by the Pilot tests of the TUI."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

SIZE = (130, 40)


async def wait_for(pilot, condition, timeout: float = 60.0, what: str = "condition") -> None:
    """Polls ``condition`` while the app runs; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.05)


async def chat(app, pilot, prompts, timeout: float = 60.0) -> None:
    """Waits for the app's backend, then sends each prompt and waits for its turn to end."""
    await wait_for(pilot, lambda: app.loaded is not None and app.loading is None, timeout, what="the backend")
    for prompt in prompts:
        before = app.turns_ended
        app.chat.input.text = prompt
        app.chat.input.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.turns_ended > before, timeout, what="the turn")
    await pilot.pause(0.1)


def write_recording(path, events, *, killed=False):
    """A recording of ``events`` under a tiny profile's header, to replay without a model
    (``killed``: as a process killed after the last event left it, an open turn open)."""
    from specchat.sessions.recorder import Recorder, build_header
    from tests.support.sessions_helpers import killed_after

    with Recorder(path) as rec:
        rec.start(build_header({"name": "tiny"}))
        for event in events:
            rec.record(event)
    return killed_after(path, len(events)) if killed else path


@asynccontextmanager
async def replayed(path):
    """(app, pilot) once the app has replayed the recording at ``path`` at full speed."""
    from specchat.ui.app import SpecchatApp
    from specchat.ui.backend import replay_loader

    app = SpecchatApp(loader=replay_loader(path, "max"), deterministic=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.turns_ended >= 1, what="the replay")
        yield app, pilot
