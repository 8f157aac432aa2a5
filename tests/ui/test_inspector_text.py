"""The inspector names a rejected draft by its text, not "id 198" (issue 59, newcomer item 11)."""

from __future__ import annotations

import asyncio

from specchat.events import Alternative, Token
from specchat.ui.screens.inspector import InspectorScreen, token_details
from tests.support.pilot import replayed
from tests.support.ui_session import turn_events, write_recording


def resampled(**fields) -> Token:
    return Token(id=7, kind="resampled", p=0.4, rejected_id=198, rejected_p=0.1, rejected_q=0.6, text=" cat", **fields)


def test_a_rejected_draft_is_named_by_its_text():
    assert "rejected draft: '\\n' (id 198) with p 0.1000, q 0.6000" in token_details(
        resampled(rejected_text="\n"), 0, 1)  # repr: a newline or a space shows
    # a recording made before tokens carried it: the target's alternatives may know the text
    known = resampled(alternatives=(Alternative(7, 0.4, " cat"), Alternative(198, 0.1, " dog")))
    assert "rejected draft: ' dog' (id 198)" in token_details(known, 0, 1)
    assert "rejected draft: id 198 with" in token_details(resampled(), 0, 1)  # nothing knows it


def test_the_inspector_shows_the_rejected_drafts_text(tmp_path):
    path = write_recording(tmp_path / "chat.jsonl", [turn_events(1, "How does speculative decoding work?")])

    async def run():
        async with replayed(path) as (app, pilot):
            await pilot.pause(0.1)
            await pilot.press("f4", "home")
            assert isinstance(app.screen, InspectorScreen)
            while app.screen.token.kind != "resampled":
                await pilot.press("n")
            details = str(app.screen.query_one("#inspector-details").render())
            assert "rejected draft: ' which' (id 55)" in details

    asyncio.run(run())
