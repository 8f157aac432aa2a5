"""Ctrl+R → Enter replays a session beside the live chat (issue 59, newcomer item 5).

The trial: the replay took the live chat's place (its model let go), Esc did not stop
it, the status line still said "ready", and the way back was a key nobody was told of.
A real app with the tiny model under Pilot, the recording played at its recorded pace.
"""

from __future__ import annotations

import asyncio
import json

from specchat.live import LiveLoader
from specchat.sessions.fileformat import sessions_dir
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.history import HistoryScreen
from specchat.ui.screens.replay import ReplayScreen
from tests.support.pilot import SIZE, chat, wait_for
from tests.support.ui_session import turn_events, write_recording


def paced(path, seconds_per_event: float):
    """The recording as if each event had come ``seconds_per_event`` after the one before
    (written in one go, its wall-clock stamps are all but equal: it would play at once)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    start = records[0].get("ts", 0.0)
    for i, record in enumerate(records):
        if "ts" in record:
            record["ts"] = round(start + i * seconds_per_event, 6)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def status(screen) -> str:
    return str(screen.query_one("#status-text").render())


def test_a_replay_opens_beside_the_chat_esc_stops_it_and_comes_back(tiny_profile_path):
    directory = sessions_dir()
    directory.mkdir(parents=True, exist_ok=True)
    # ~600 steps 50 ms apart: half a minute, so Esc lands mid-replay
    paced(write_recording(directory / "long.jsonl", [turn_events(1, "tell me everything", n_tokens=1500)]), 0.05)

    async def run():
        app = SpecchatApp(str(tiny_profile_path), loader=LiveLoader(record=False))
        async with app.run_test(size=SIZE) as pilot:
            await chat(app, pilot, ["hello"])
            live, live_reply = app.loaded, app.chat.transcript.last_reply.text
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.sessions, what="the list")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen), what="the replay screen")
            replay = app.screen
            await wait_for(pilot, lambda: replay.transcript.last_reply is not None
                           and len(replay.transcript.last_reply.tokens) > 5, what="the replay to play")
            assert "playing… · Esc stops it" in status(replay)  # not "ready"
            assert replay.sub_title == "replay of long.jsonl"
            # beside, not instead: the live chat, its model and its reply are as they were
            assert app.loaded is live and live.can_send and app.chat.transcript.last_reply.text == live_reply
            assert app.chat.is_attached

            await pilot.press("escape")  # stops the replay …
            await wait_for(pilot, lambda: not replay.playing and "stopped" in status(replay), what="the stop")
            assert "Esc: back to the chat" in status(replay)
            shown = len(replay.transcript.last_reply.tokens)
            await pilot.pause(0.5)
            assert len(replay.transcript.last_reply.tokens) == shown < 1500, "the replay went on after Esc"
            assert app.screen is replay, "the first Esc stops the replay, it does not close it"

            await pilot.press("escape")  # … and the next one comes back to the chat, which goes on
            assert app.screen is app.chat
            await chat(app, pilot, ["and again"])
            assert len(app.chat.transcript.replies) == 2

    asyncio.run(run())


def test_a_replay_that_cannot_be_read_says_so_in_one_line_and_esc_comes_back(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")

    async def run():
        app = SpecchatApp(None, loader=lambda ref, progress: (_ for _ in ()).throw(RuntimeError("no model")),
                          deterministic=True)
        async with app.run_test(size=SIZE) as pilot:
            app.open_recording((bad, "replay"))
            await pilot.pause(0.1)
            replay = app.screen
            assert isinstance(replay, ReplayScreen)
            await wait_for(pilot, lambda: not replay.playing or replay.query(".note.-error"), what="the failure")
            await wait_for(pilot, lambda: replay.query(".note.-error"), what="the error note")
            assert "cannot replay bad.jsonl" in str(replay.query_one(".note.-error").render())
            await wait_for(pilot, lambda: "Esc: back to the chat" in status(replay), what="the status")
            await pilot.press("escape")
            assert app.screen is app.chat

    asyncio.run(run())


def test_specchat_replay_says_it_plays_and_esc_stops_it(tmp_path):
    """`specchat replay` (the app's own replay): the status said "ready" while it played."""
    from specchat.ui.backend import replay_loader

    path = paced(write_recording(tmp_path / "long.jsonl", [turn_events(1, "tell me", n_tokens=1500)]), 0.05)

    async def run():
        app = SpecchatApp(None, loader=replay_loader(path), deterministic=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.chat.transcript.last_reply is not None
                           and len(app.chat.transcript.last_reply.tokens) > 5, what="the replay to play")
            assert status(app.chat).endswith("playing… Esc stops it")
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.generating, what="the stop")
            assert status(app.chat).endswith("played: nothing to send")
            assert len(app.chat.transcript.last_reply.tokens) < 1500

    asyncio.run(run())
