"""Does rendering keep up? 2,000 tokens replayed at full speed through the TUI.

A measurement, not a timed assertion (timing on a shared CI box proves nothing):
it reports how far the UI fell behind the event stream and checks only that every
token arrived. Run with ``-s`` to see the report.
"""

from __future__ import annotations

import asyncio
import time

from specchat.ui.app import SpecchatApp
from specchat.ui.backend import replay_loader
from tests.support.ui_session import turn_events, write_recording

N_TOKENS = 2000


def test_ui_keeps_up_with_2000_tokens(tmp_path, capsys):
    events = turn_events(1, "stream a lot", n_tokens=N_TOKENS, seed=1)
    path = write_recording(tmp_path / "long.jsonl", [events])
    report = {}

    async def run():
        app = SpecchatApp(None, loader=replay_loader(path, "max"), deterministic=True)
        async with app.run_test(size=(120, 40)) as pilot:
            while app.loaded is None:
                await pilot.pause(0.01)
            while app.turns_ended < 1:
                await pilot.pause(0.005)
            applied = time.perf_counter()
            await pilot.pause()  # one more refresh: the last batch is on screen
            rendered = time.perf_counter()
            reply = app.chat.transcript.last_reply
            report.update(
                tokens=len(reply.tokens),
                events=app.events_applied,
                produced_s=app.last_put_at - app.loaded_at,
                ui_total_s=rendered - app.loaded_at,
                behind_s=rendered - app.last_put_at,
                worst_put_to_apply_s=app.max_lag_s,
                last_render_s=rendered - applied,
            )
            assert len(reply.tokens) == N_TOKENS
            assert reply.text == events[-1].text

    asyncio.run(run())
    with capsys.disabled():
        print(
            f"\n[ui throughput] {report['tokens']} tokens in {report['events']} events: "
            f"replay produced them in {report['produced_s']:.2f} s, the UI showed the last one "
            f"{report['ui_total_s']:.2f} s after the start ({report['tokens'] / report['ui_total_s']:.0f} tokens/s), "
            f"{report['behind_s']:.2f} s behind the stream; "
            f"worst delay from event to UI {report['worst_put_to_apply_s'] * 1000:.0f} ms; "
            f"final render {report['last_render_s'] * 1000:.0f} ms"
        )


def test_the_end_of_a_turn_is_shown_at_once_whatever_the_drain_interval(tmp_path, monkeypatch):
    """Token batches wait for the drain interval; the turn's end does not (it would add up
    to an interval to every reply's visible duration)."""
    import specchat.ui.app as app_module

    monkeypatch.setattr(app_module, "DRAIN_INTERVAL_S", 30.0)
    path = write_recording(tmp_path / "short.jsonl", [turn_events(1, "hi", n_tokens=20, seed=2)])

    async def run():
        app = SpecchatApp(None, loader=replay_loader(path, "max"), deterministic=True)
        async with app.run_test(size=(120, 40)) as pilot:
            start = time.perf_counter()
            while app.turns_ended < 1 and time.perf_counter() - start < 10:
                await pilot.pause(0.01)
            assert app.turns_ended == 1, "the turn's end waited for the 30 s drain interval"
            assert len(app.chat.transcript.last_reply.tokens) == 20

    asyncio.run(run())
