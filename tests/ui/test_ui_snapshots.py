"""SVG snapshots of the chat screen, driven by a recorded session through replay.

Deterministic: the recording has fixed token kinds, probabilities and millisecond
costs; ``deterministic=True`` stops the cursor blinking. Update with
``pytest tests/ui/test_ui_snapshots.py --snapshot-update`` and look at the SVGs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.ui.app import SpecchatApp
from specchat.ui.backend import replay_loader
from tests.support import ROOT
from tests.support.ui_session import turn_events, write_recording

SIZE = (132, 44)
THEMES = [ROOT / "themes"]


@pytest.fixture
def recording(tmp_path) -> Path:
    return write_recording(tmp_path / "chat.jsonl", [turn_events(1, "How does speculative decoding work?")])


def replay_app(recording: Path, **kwargs) -> SpecchatApp:
    return SpecchatApp(None, loader=replay_loader(recording, "max"), themes_from=THEMES,
                       deterministic=True, **kwargs)


async def _finished(pilot) -> None:
    app = pilot.app
    while app.turns_ended < 1:
        await pilot.pause(0.05)
    app.chat.flush_panel(force=True)
    await pilot.pause(0.1)


def test_chat_with_finished_reply_and_panel(snap_compare, recording):
    # Timings are fixed by the recording, so the cost figures are shown too.
    assert snap_compare(replay_app(recording, hide_timing=False), terminal_size=SIZE, run_before=_finished)


def test_chat_markdown_view_high_contrast(snap_compare, recording):
    async def run_before(pilot):
        await _finished(pilot)
        pilot.app.switch_theme("specchat-high-contrast")
        await pilot.press("f3")
        await pilot.pause(0.2)

    assert snap_compare(replay_app(recording), terminal_size=SIZE, run_before=run_before)


def test_inspector_on_a_resampled_token(snap_compare, recording):
    async def run_before(pilot):
        await _finished(pilot)
        await pilot.press("f4")
        await pilot.press("home")
        while pilot.app.screen.token.kind != "resampled":  # "n": next resampled or bonus token
            await pilot.press("n")
        await pilot.pause(0.1)

    assert snap_compare(replay_app(recording), terminal_size=SIZE, run_before=run_before)
