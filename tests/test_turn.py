"""The one turn loop (specchat/turn.py): any source of steps, one fold, one TurnFinished."""

from __future__ import annotations

import re

import pytest

from specchat.events import ErrorEvent, Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted, UserMessage
from specchat.telemetry import ChatTelemetry, Telemetry
from specchat.turn import Conversation, TurnPlan
from tests.support import ROOT


def step(n_tokens: int, drafted: int = 0, accepted: int = 0, finish: str | None = None) -> Step:
    tokens = tuple(Token(id=i, kind="accepted" if i < accepted else "target", text=f"t{i}") for i in range(n_tokens))
    stats = StepStats(drafted, drafted, accepted, alpha_sum=float(accepted), alpha_count=drafted,
                      draft_ms=1.0, verify_ms=4.0, total_ms=5.0)
    return Step(tokens, stats, finish)


class Scripted(Conversation):
    """A source of steps from a list; ``fail_after`` raises after that many steps."""

    def __init__(self, steps, *, bounds_reply=True, max_new_tokens=512, cancel_after=None, fail_after=None,
                 underivable=()):
        super().__init__(ChatTelemetry(max_gamma=4, underivable=underivable), max_new_tokens=max_new_tokens)
        self.bounds_reply = bounds_reply
        self.script, self.cancel_after, self.fail_after = steps, cancel_after, fail_after
        self.seen = 0

    def begin_turn(self, messages):
        return TurnPlan(len(messages), self._steps(), 2, "note")

    def _steps(self):
        for s in self.script:
            if self.fail_after is not None and self.seen >= self.fail_after:
                raise OSError("the source broke")
            self.seen += 1
            yield s

    def cancelled(self):
        return self.cancel_after is not None and self.seen >= self.cancel_after


def run(chat: Conversation, text: str = "hi") -> list:
    return list(chat.send(text))


def test_a_turn_yields_the_events_in_order_and_keeps_the_history():
    chat = Scripted([step(2, 2, 1), step(1), step(3, 2, 2, finish="eos")])
    events = run(chat)
    assert [type(e) for e in events] == [UserMessage, TurnStarted, StepEvent, StepEvent, StepEvent, TurnFinished]
    assert events[1] == TurnStarted(1, 1, 2, "note")
    finished = events[-1]
    assert (finished.finish_reason, finished.text) == ("eos", "t0t1t0t0t1t2")
    assert chat.history == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": finished.text}]


def test_the_fold_is_the_telemetry_fed_every_step_once():
    steps = [step(2, 2, 1), step(1), step(3, 2, 2, finish="eos")]
    chat = Scripted(steps)
    finished = run(chat)[-1]
    alone = Telemetry(max_gamma=4)
    for s in steps:
        alone.update(s.stats, len(s.tokens))
    assert finished.metrics["turn"] == alone.snapshot().to_dict() == chat.turn_metrics.to_dict()
    run(Scripted([]))  # another conversation does not touch this one
    second = run(chat)[-1]
    assert second.metrics["turn"]["num_steps"] == 3 and second.metrics["session"]["num_steps"] == 6


@pytest.mark.parametrize("bounds, finish, steps_seen", [(True, "eos", 3), (False, "length", 2)])
def test_max_new_tokens_is_enforced_only_for_sources_that_do_not(bounds, finish, steps_seen):
    chat = Scripted([step(2), step(2), step(2, finish="eos")], bounds_reply=bounds, max_new_tokens=4)
    events = run(chat)
    assert events[-1].finish_reason == finish
    assert sum(isinstance(e, StepEvent) for e in events) == steps_seen


def test_a_cancel_ends_the_turn_after_the_step_and_keeps_the_partial_reply():
    events = run(Scripted([step(1), step(1), step(1)], cancel_after=2))
    assert events[-1].finish_reason == "cancelled" and events[-1].text == "t0t0"


def test_a_failing_source_is_one_error_line_then_the_turn_finishes():
    chat = Scripted([step(1), step(1)], fail_after=1)
    events = run(chat)
    assert [type(e) for e in events][-2:] == [ErrorEvent, TurnFinished]
    assert events[-2].message == "generation failed: OSError: the source broke"
    assert events[-1].finish_reason == "error" and events[-1].text == "t0"
    assert chat.history[-1] == {"role": "assistant", "content": "t0"}


def test_underivable_figures_are_none_in_every_snapshot():
    finished = run(Scripted([step(2, 2, 1)], underivable=("cost_ratio", "verify_cost")))[-1]
    assert finished.metrics["turn"]["cost_ratio"] is None and finished.metrics["turn"]["verify_cost"] == {}


def test_only_the_turn_loop_assembles_a_turn_finished():
    """One path: a second loop would build its own TurnFinished."""
    builders = [str(path.relative_to(ROOT)) for path in (ROOT / "specchat").rglob("*.py")
                if re.search(r"\bTurnFinished\(", path.read_text(encoding="utf-8"))]
    assert builders == ["specchat/turn.py"]


def test_the_ui_shows_the_sources_snapshots_and_folds_no_step_itself():
    from specchat.ui.figures import FigureFeed, Figures, LiveFigures

    folds = [str(p.relative_to(ROOT)) for p in (ROOT / "specchat" / "ui").rglob("*.py")
             if re.search(r"\b\w*Telemetry\(|\.update\(\s*\w+\.step\.stats", p.read_text(encoding="utf-8"))]
    assert folds == []
    for interval_s, expected in ((0.0, ["TurnStarted", "StepEvent", "StepEvent", "StepEvent"]),
                                 (3600.0, ["TurnStarted"])):  # throttled; the turn's end carries its own
        chat = Scripted([step(2, 2, 1), step(1), step(3, 2, 2, finish="eos")])
        feed, figures, taken = FigureFeed(chat, interval_s), LiveFigures(), []
        for event in chat.send("hi"):
            figures.apply(event)
            snapshot = feed.after(event)
            if snapshot is not None:
                assert isinstance(snapshot, Figures)
                taken.append(type(event).__name__)
                figures.apply(snapshot)
                assert figures.turn == chat.turn_metrics  # the source's figures as they stood
        assert taken == expected
        assert figures.turn == chat.turn_metrics and figures.session == chat.session_metrics


def test_a_source_failing_after_a_step_that_named_a_finish_still_finishes_as_error():
    events = run(Scripted([step(1, finish="stop"), step(1)], fail_after=1))
    assert isinstance(events[-2], ErrorEvent) and events[-1].finish_reason == "error"
