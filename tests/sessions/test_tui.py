"""The TUI driven by a replay exactly as by the live chat it recorded (Pilot, tiny model),
and the TUI replay in a subprocess where torch cannot be imported."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time

from specchat.live import LiveLoader
from specchat.ui.app import SpecchatApp
from specchat.ui.backend import replay_loader
from specchat.ui.figures import figure_rows
from specchat.ui.widgets.reply import ReplyView
from tests.support import ROOT
from tests.support.pilot import SIZE, chat, wait_for


def screen_state(app: SpecchatApp) -> dict:
    """What the user sees: replies with each token's provenance, the panel's rows, the
    inspector's tokens and the panel's configuration."""
    figures = app.chat.figures
    return {
        "replies": [
            (r.turn, r.finish_reason, [(t.id, t.kind, t.text, t.p, t.q) for t in r.tokens])
            for r in app.chat.query(ReplyView)
        ],
        "panel": figure_rows(figures.turn, figures.session),
        "session": figures.session.to_dict(),
        "inspector": [(t.id, t.kind, t.alternatives) for t in app.chat.last_tokens],
        "method": app.info.method,
        "max_gamma": app.info.max_gamma,
    }


async def replayed_state(path) -> dict:
    """What the user sees once a recording has replayed in the TUI at full speed."""
    app = SpecchatApp(loader=replay_loader(path, "max"), deterministic=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None and app.turns_ended >= 1, what="the replay")
        await pilot.pause(0.1)
        return screen_state(app)


def test_replay_drives_the_ui_exactly_like_the_live_chat(tiny_profile_path):
    async def live():
        app = SpecchatApp(str(tiny_profile_path), loader=LiveLoader(record=True), deterministic=True)
        async with app.run_test(size=SIZE) as pilot:
            await chat(app, pilot, ("def add(a, b):", "and subtract?"))
            return screen_state(app), app.info.recording

    live_state, path = asyncio.run(live())
    assert len(live_state["replies"]) == 2 and live_state["replies"][0][2]
    assert asyncio.run(replayed_state(path)) == live_state


TUI_REPLAY_NO_TORCH = textwrap.dedent(
    """
    import asyncio, importlib.abc, json, sys, time
    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "transformers"):
                raise ImportError(f"{name} is blocked in this test")
    sys.meta_path.insert(0, Blocked())
    from specchat.ui.app import SpecchatApp
    from specchat.ui.backend import replay_loader
    async def main():
        app = SpecchatApp(loader=replay_loader(sys.argv[1], "max"), deterministic=True)
        async with app.run_test(size=(120, 36)) as pilot:
            deadline = time.monotonic() + 60
            while not (app.loaded is not None and app.turns_ended >= 1) and time.monotonic() < deadline:
                await pilot.pause(0.05)
            await pilot.pause(0.1)
            replies = [r.text for r in app.chat.query("ReplyView")]
            return {"replies": replies, "profile": app.info.profile_name if app.info else None}
    result = asyncio.run(main())
    result["heavy"] = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print("RESULT=" + json.dumps(result))
    """
)


def test_tui_replay_runs_where_torch_cannot_be_imported(tmp_path):
    from tests.support.sessions_helpers import sample_events
    from specchat.sessions.recorder import Recorder, build_header

    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        rec.start(build_header({"name": "tiny", "speculation": {"method": "draft_model"}}))
        for ev in sample_events():
            rec.record(ev)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", TUI_REPLAY_NO_TORCH, str(path)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT=")][-1][7:])
    assert result["heavy"] == [] and result["profile"] == "tiny"
    assert result["replies"][0] == "Hello, world\n! bye"


def test_history_screen_lists_sessions_and_returns_the_choice(tmp_path):
    from tests.support.sessions_helpers import killed_after, sample_events
    from specchat.sessions.recorder import Recorder, build_header
    from specchat.ui.screens.history import HistoryScreen
    from textual.app import App
    from textual.widgets import DataTable

    for name, events in (("a.jsonl", sample_events()), ("b.jsonl", sample_events()[:1])):
        with Recorder(tmp_path / name) as rec:
            rec.start(build_header({"name": "tiny"}))
            for ev in events:
                rec.record(ev)
    killed_after(tmp_path / "b.jsonl", 1).touch()  # killed mid-turn, after the message
    results = []

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(HistoryScreen(tmp_path), results.append)

    async def run():
        app = Host()
        async with app.run_test(size=SIZE) as pilot:
            screen = app.screen
            await wait_for(pilot, lambda: screen.sessions, what="the list")
            table = screen.query_one(DataTable)
            assert table.row_count == 2
            cells = [[str(cell) for cell in table.get_row_at(i)] for i in range(2)]  # Text: never markup
            assert "Say hello in two lines" in cells[1] and "3.00" in cells[1] and "10" in cells[1]
            assert "middle of turn 1" in cells[0][-1]
            await pilot.press("down", "o")
            await pilot.pause(0.1)

    asyncio.run(run())
    assert results == [(tmp_path / "a.jsonl", "resume")]
