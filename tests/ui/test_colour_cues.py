"""Provenance cues on screen, a replayed reply drawn by the real app: with colour, colour
alone (bold, underlined and italic runs starting mid-word made prose flicker as it
streamed); with NO_COLOR, the text attributes carry each kind, in the reply, the legend
and the inspector alike. Planted bug: the attributes back on the colour styles — caught.
"""

from __future__ import annotations

import asyncio

import pytest

from specchat.ui.widgets import provenance_text
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.provenance_text import ProvenanceText
from tests.support.mutations import patched
from tests.ui.test_ui_snapshots import SIZE, _finished, recording, replay_app  # noqa: F401 (a fixture)

MARKERS = ("bold", "underline", "italic")


def drawn_attributes(recording) -> dict[str, set[str]]:
    """Which text attributes the reply's, the legend's and the inspector's cells carry."""
    async def run() -> dict[str, set[str]]:
        app = replay_app(recording)
        async with app.run_test(size=SIZE) as pilot:
            await _finished(pilot)
            found = {"reply": attributes(app.query_one(ProvenanceText)), "legend": attributes(app.query_one(Legend))}
            await pilot.press("f4")
            await pilot.pause(0.1)
            found["inspector"] = attributes(app.screen.query_one("#inspector-text"))
        return found

    return asyncio.run(run())


def attributes(widget) -> set[str]:
    seen = set()
    for y in range(widget.size.height):
        for segment in widget.render_line(y):
            style = segment.style
            if style is not None:
                seen.update(m for m in MARKERS if getattr(style, m))
    return seen


def test_with_colour_the_colour_alone_marks_a_token(recording):
    assert drawn_attributes(recording) == {"reply": set(), "legend": set(), "inspector": set()}


def test_without_colour_the_text_attributes_mark_each_kind(recording, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    found = drawn_attributes(recording)
    assert all(found[where] == set(MARKERS) for where in ("reply", "legend", "inspector")), found


def test_planted_attributes_with_colour_are_caught(recording):
    with patched(provenance_text, "kind_styles", lambda app: provenance_text.NO_COLOUR_STYLES), \
            pytest.raises(AssertionError):
        test_with_colour_the_colour_alone_marks_a_token(recording)
