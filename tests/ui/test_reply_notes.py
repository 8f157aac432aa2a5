"""A reply's footer of figures and the notice when drafting changes character (issue 59,
newcomer item 2): the pure text in tables, then both in a real app through replay."""

from __future__ import annotations

import asyncio

import pytest

from specchat.events import Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted, UserMessage
from specchat.telemetry import MetricsSnapshot, Telemetry
from specchat.ui.reply_notes import AcceptanceWatch, reply_footer
from specchat.ui.widgets.reply import ReplyView
from tests.support.pilot import replayed
from tests.support.ui_session import write_recording

DRAFTED = dict(num_drafts=40, mean_acceptance_length=1.62, tokens_per_s=3.8, ttft_ms=1420.0)


@pytest.mark.parametrize(
    "snap, hide, footer",
    [
        (MetricsSnapshot(num_tokens=332, measured_speedup=1.3, measured_speedup_interval=(1.1, 1.52), **DRAFTED), False,
         "332 tokens · 3.8 tok/s · first token 1,420 ms · mean acceptance 1.62 · 1.30× plain (95 %: 1.10–1.52)"),
        # a busy machine: the ratio with its interval and the caveat, in one phrase
        (MetricsSnapshot(num_tokens=332, measured_speedup_busy=1.3, measured_speedup_interval=(0.9, 1.9),
                         busy_machine=True, **DRAFTED), False,
         "332 tokens · 3.8 tok/s · first token 1,420 ms · mean acceptance 1.62 · ~1.30× plain (95 %: 0.90–1.90; "
         "busy machine, rough)"),
        # too few steps to tell: no figure rather than a guess
        (MetricsSnapshot(num_tokens=5, measured_speedup_note="too early to say", **DRAFTED), False,
         "5 tokens · 3.8 tok/s · first token 1,420 ms · mean acceptance 1.62"),
        # plain decoding: no acceptance, no "1.00× plain"
        (MetricsSnapshot(num_tokens=1, tokens_per_s=9.0, measured_speedup=1.0), False, "1 token · 9.0 tok/s"),
        # snapshots (deterministic mode): no wall-clock figure
        (MetricsSnapshot(num_tokens=332, measured_speedup=1.3, **DRAFTED), True, "332 tokens · mean acceptance 1.62"),
    ],
)
def test_reply_footer(snap, hide, footer):
    assert reply_footer(snap, hide) == footer


def history(usual: float, lately: float, n_usual: int = 30, n_lately: int = 12) -> tuple[float, ...]:
    return (usual,) * n_usual + (lately,) * n_lately


def test_the_watch_says_a_collapse_a_loop_and_auto_setting_drafting_aside_once_each():
    watch = AcceptanceWatch()
    assert watch.observe(MetricsSnapshot(acceptance_history=history(0.6, 0.55))) == []
    collapsed = MetricsSnapshot(acceptance_history=history(0.6, 0.1))
    said = watch.observe(collapsed, "auto")
    assert len(said) == 1 and said[0].startswith("acceptance collapsed: the last 12 drafting steps kept 10%")
    assert "60% before" in said[0]
    assert watch.observe(collapsed, "auto") == [], "said once while it lasts"
    assert watch.observe(MetricsSnapshot(acceptance_history=history(0.6, 0.6))) == []
    assert watch.observe(collapsed) != [], "said again once it came back and fell again"
    # a repetition loop: nearly every draft kept, where about half were before
    looped = watch.observe(MetricsSnapshot(acceptance_history=history(0.5, 1.0)))
    assert len(looped) == 1 and "loop" in looped[0] and "100%" in looped[0]
    # a chat that always quotes (every draft kept from the start) is no loop
    assert AcceptanceWatch().observe(MetricsSnapshot(acceptance_history=history(1.0, 1.0))) == []
    # too few drafting steps to know what is usual
    assert AcceptanceWatch().observe(MetricsSnapshot(acceptance_history=history(0.6, 0.0, 5))) == []


def test_the_watch_says_when_gamma_auto_sets_drafting_aside():
    watch = AcceptanceWatch()
    assert watch.observe(MetricsSnapshot(verdict="pays"), "auto") == []
    said = watch.observe(MetricsSnapshot(verdict="does not pay"), "auto")
    assert len(said) == 1 and said[0].startswith("γ = auto set drafting aside")
    assert watch.observe(MetricsSnapshot(verdict="does not pay"), "auto") == []
    # a fixed γ sets nothing aside; a verdict that never said "pays" changed nothing
    fixed = AcceptanceWatch()
    fixed.observe(MetricsSnapshot(verdict="pays"), 3)
    assert fixed.observe(MetricsSnapshot(verdict="does not pay"), 3) == []
    assert AcceptanceWatch().observe(MetricsSnapshot(verdict="does not pay"), "auto") == []
    hidden = AcceptanceWatch()
    hidden.observe(MetricsSnapshot(verdict="pays"), "auto", hide_timing=True)
    assert hidden.observe(MetricsSnapshot(verdict="does not pay"), "auto", hide_timing=True) == []


def collapsing_chat() -> list:
    """Two replies folded by one telemetry, as a chat session folds them: the first keeps
    most of its drafts, the second keeps none (the text left what the draft knew)."""
    session = Telemetry(max_gamma=4)
    events: list = []
    for turn, kept in ((1, 3), (2, 0)):
        this_turn = Telemetry(max_gamma=4)
        events += [UserMessage(turn, f"prompt {turn}"), TurnStarted(turn, 8, 3)]
        for i in range(30):
            plain = i % 7 == 0
            stats = (StepStats(0, 0, 0, verify_ms=10.0, total_ms=10.5) if plain else
                     StepStats(3, 3, kept, alpha_sum=kept * 0.9, alpha_count=min(3, kept + 1), draft_forwards=3,
                               draft_ms=4.5, verify_ms=18.0, total_ms=23.0))
            kinds = ["target"] if plain else ["accepted"] * kept + ["bonus" if kept == 3 else "resampled"]
            tokens = tuple(Token(id=10 + j, kind=kind, p=0.5, text="w ") for j, kind in enumerate(kinds))
            for telemetry in (this_turn, session):
                telemetry.update(stats, len(tokens))
            events.append(StepEvent(turn, Step(tokens, stats), 0.01 * i))
        metrics = {"turn": this_turn.snapshot().to_dict(), "session": session.snapshot().to_dict()}
        events.append(TurnFinished(turn, "length", "…", metrics, 0.3))
    return events


def test_each_reply_ends_with_its_figures_and_a_collapse_is_said_in_the_chat(tmp_path):
    path = write_recording(tmp_path / "chat.jsonl", [collapsing_chat()])

    async def run():
        async with replayed(path) as (app, pilot):
            await pilot.pause(0.2)
            replies = list(app.chat.query(ReplyView))
            assert len(replies) == 2
            for reply in replies:
                footer = str(reply.footer.render())
                assert reply.footer.display and footer.startswith(f"{len(reply.tokens)} tokens · mean acceptance")
                assert "tok/s" not in footer  # deterministic mode: no wall-clock figure
            assert reply.text == "…"  # the footer is no part of what Ctrl+O copies
            notes = [str(n.render()) for n in app.chat.query(".note.-warning")]
            assert sum(n.startswith("acceptance collapsed") for n in notes) == 1, notes

    asyncio.run(run())


def test_the_watch_says_when_gamma_auto_drafts_again_after_setting_drafting_aside():
    """The set-aside notice stood in the chat above a panel that said "pays" again later in
    the same reply (the newcomer trial's note A, issue 59): the turn back is said too, once."""
    watch = AcceptanceWatch()
    watch.observe(MetricsSnapshot(verdict="pays"), "auto")
    assert watch.observe(MetricsSnapshot(verdict="does not pay"), "auto")[0].startswith("γ = auto set drafting aside")
    said = watch.observe(MetricsSnapshot(verdict="pays"), "auto")
    assert len(said) == 1 and said[0].startswith("γ = auto drafts again")
    assert watch.observe(MetricsSnapshot(verdict="pays"), "auto") == []
    assert watch.observe(MetricsSnapshot(verdict="does not pay"), "auto")[0].startswith("γ = auto set drafting aside")
    fresh = AcceptanceWatch()  # "pays" from the start is no turn back
    assert fresh.observe(MetricsSnapshot(verdict="pays"), "auto") == []


def test_a_snapshot_without_a_verdict_between_two_keeps_the_watchs_place():
    """"does not pay" → no verdict → "pays" still says the turn back, and "pays" → no verdict →
    "does not pay" still says the set-aside (found in review). Planted: a None verdict forgets."""
    watch = AcceptanceWatch()
    watch.observe(MetricsSnapshot(verdict="pays"), "auto")
    assert watch.observe(MetricsSnapshot(verdict=None), "auto") == []
    assert watch.observe(MetricsSnapshot(verdict="does not pay"), "auto")[0].startswith("γ = auto set drafting aside")
    assert watch.observe(MetricsSnapshot(verdict=None), "auto") == []
    assert watch.observe(MetricsSnapshot(verdict="pays"), "auto")[0].startswith("γ = auto drafts again")

