"""The one private Textual method specchat overrides, guarded.

ChatScreen wraps ``Screen._on_timer_update`` (Textual's paint tick) so the screen is
drawn between the model's steps (step_gate.py). Textual 8 has no public hook around a
paint (``Screen.refresh`` schedules one; nothing is called when it happens), so the
override stays, pinned by pyproject's ``textual>=8,<9`` and by these tests: an upgrade
that renames the method or stops painting through it fails here, by name, instead of
silently letting the UI draw over the model's steps.
"""

from __future__ import annotations

import asyncio
import inspect

from tests.support.pilot import replayed, write_recording
from tests.support.sessions_helpers import sample_events
from textual.screen import Screen

from specchat.ui.screens.chat import ChatScreen


def test_textual_still_has_the_paint_tick_chat_screen_overrides():
    assert "_on_timer_update" in vars(Screen), (
        "Textual no longer defines Screen._on_timer_update: ChatScreen's paint gating (step_gate.py) is dead — "
        "find the new paint tick and move the override")
    assert "self._on_timer_update" in inspect.getsource(Screen), (
        "Textual's update timer no longer calls Screen._on_timer_update: move ChatScreen's override")
    assert ChatScreen._on_timer_update is not Screen._on_timer_update


def test_the_screen_paints_through_the_gated_tick(tmp_path, monkeypatch):
    painted = []
    original = Screen._compositor_refresh

    def watched(self):
        painted.append(self.app.gate._drawing if isinstance(self, ChatScreen) else None)
        return original(self)

    monkeypatch.setattr(Screen, "_compositor_refresh", watched)

    async def run():
        async with replayed(write_recording(tmp_path / "s.jsonl", sample_events())):
            pass

    asyncio.run(run())
    chat_paints = [drawing for drawing in painted if drawing is not None]
    assert chat_paints, "the chat screen was never painted"
    # mounting and resizing lay out outside the tick; the streamed replies paint through it
    assert any(chat_paints), "no paint of the chat screen ran through ChatScreen._on_timer_update (the gate)"
