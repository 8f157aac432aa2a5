"""One cost model (issue 27): on a recording with mixed turns, the panel's verdict, the
recommended γ and γ = auto's choice never contradict each other.

Steps come from the real controllers, asked exactly as the engine asks them (choose →
draft → assess → observe), once on a fake clock whose phases make speculation pay, stop
paying and pay again, and once from the real engine on a tiny model. Each run is written
as a recording by the real recorder, read back and replayed through the one telemetry
fold, and after every step the panel's own texts are checked against each other:

* the verdict is "pays" exactly when the recommended γ is ≥ 1 or "auto" and its
  predicted speed-up is above 1, "does not pay" exactly when it is 0, and too early to
  say exactly when there is none; the verdict's line names the same γ and speed-up;
* when auto decided (not a probe, calibration or exploration step) and predicted its
  choice to beat plain decoding, the verdict says speculation pays;
* where drafts have one context (a model's), auto saying no γ beats plain decoding
  means the verdict says it does not pay, and a recommended γ ≥ 1 means auto drafts.

The fake-clock run must visit every combination: each verdict, auto drafting and
decoding plainly, "auto" and a fixed γ and 0 recommended.
"""

from __future__ import annotations

import random
import re

import pytest

from specchat.engine.gamma.controller import AdaptiveGamma, FixedGamma
from specchat.engine.proposers import Candidate
from specchat.engine.proposers.ngram_index import NgramMatch
from specchat.events import Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted, UserMessage
from specchat.sessions.reader import read_recording
from specchat.sessions.replay import recording_telemetry
from specchat.ui.figures import breakeven_text, controller_text, gain_text, recommended_gamma_text

from tests.support.pilot import write_recording


class Stub:
    """What the controller asks of a proposer: its candidates for the next step, and
    which one it used. ``contexts`` yields each step's candidates."""

    drafting_model = ""

    def __init__(self, contexts) -> None:
        self.contexts = contexts
        self.selected = ""

    def candidates(self, ids, limit):
        return next(self.contexts)

    def select(self, source):
        self.selected = source


def fake_step(controller, candidates_source, accept, rng, prefill=False) -> StepStats:
    """One step as the engine runs it, on a fake clock: a plain step costs 10 ms, each
    draft 1.5 ms to make and 2.5 ms to verify (k drafts: 10 + 2.5 k + 1.5 k ms); each
    draft is kept with probability ``accept(source, match)`` given those before it were."""
    gamma, gain = controller.choose([])
    offered = candidates_source()
    # auto selects a source (hybrid); a fixed γ drafts from the first on offer
    candidate = next((c for c in offered if c.source == controller.proposer.selected), offered[0] if offered else None)
    k = min(gamma, candidate.limit) if candidate is not None else 0
    source = candidate.source if k else ""
    n = 0
    while n < k and rng.random() < accept(candidate):
        n += 1
    assessed = controller.assess(k, source)
    stats = StepStats(
        num_speculative_tokens=gamma, num_draft_tokens=k, num_accepted_tokens=n,
        alpha_sum=0.5 * min(k, n + 1), alpha_count=min(k, n + 1), draft_forwards=k,
        draft_ms=1.5 * k, verify_ms=10.0 + 2.5 * k, total_ms=10.0 + 4.0 * k + (40.0 if prefill else 0.0),
        prefill_tokens=20 if prefill else 0, predicted_gain=gain, draft_source=source,
        predicted_tokens=assessed.predicted_tokens, predicted_cost=assessed.predicted_cost,
        recommended_gamma=assessed.recommended_gamma, recommended_gain=assessed.recommended_gain)
    controller.observe(stats, None)
    return stats


def tokens_of(stats: StepStats) -> tuple[Token, ...]:
    kept = [Token(id=1, kind="accepted", p=0.5, q=0.5) for _ in range(stats.num_accepted_tokens)]
    last = "target" if not stats.num_draft_tokens else (
        "bonus" if stats.num_accepted_tokens == stats.num_draft_tokens else "resampled")
    return tuple(kept + [Token(id=2, kind=last, p=0.5)])


def as_events(turns: list[list[StepStats]], gamma) -> list:
    events = []
    for number, steps in enumerate(turns, 1):
        events += [UserMessage(turn=number, text=f"prompt {number}"),
                   TurnStarted(turn=number, prompt_tokens=20, num_speculative_tokens=gamma)]
        events += [StepEvent(turn=number, step=Step(tokens_of(s), s), t=0.01 * i) for i, s in enumerate(steps)]
        events.append(TurnFinished(turn=number, finish_reason="length", text="…"))
    return events


def replay_and_check(path, single_context: bool) -> set[tuple]:
    """Replays the recording at ``path`` step by step, checks the rules (module
    docstring) after each, and returns the combinations seen."""
    recording = read_recording(path)
    telemetry = recording_telemetry(recording, max_gamma=8)
    seen = set()
    for timed in recording.events:
        telemetry.replay(timed.event)
        if not isinstance(timed.event, StepEvent):
            continue
        stats, m = timed.event.step.stats, telemetry.session
        verdict, level = breakeven_text(m, "ngram")
        recommended = recommended_gamma_text(m)
        where = f"after a step of turn {timed.event.turn} ({verdict!r}, {recommended!r}, {controller_text(m)!r})"
        # the verdict, the recommended γ and its predicted speed-up are one answer
        if m.best_gamma is None:
            assert m.verdict is None and level == "unknown" and recommended == "recommended γ: –", where
        elif m.best_gamma == 0:
            assert m.verdict == "does not pay" and level == "bad" and m.recommended_gain <= 1.0, where
            assert recommended.startswith("recommended γ: 0"), where
        else:
            assert m.verdict == "pays" and level == "good" and m.recommended_gain > 1.0, where
            assert m.best_gamma == "auto" or m.best_gamma >= 1, where
            shown = re.search(r"γ (\S+) predicted (\S+) plain", verdict)
            assert shown and shown.groups() == (str(m.best_gamma), gain_text(m.recommended_gain)), where
            assert not shown.group(2).startswith("1.00×"), where  # "pays" never reads as no gain
            assert recommended == f"recommended γ: {m.best_gamma} (predicted {gain_text(m.recommended_gain)})", where
        # auto's choice against the verdict (a decision: not a probe, calibration or exploration)
        decided = stats.predicted_gain is not None
        if decided and stats.predicted_gain > 1.0:
            assert m.verdict == "pays", where
        if single_context and decided and stats.num_speculative_tokens == 0:
            assert m.verdict == "does not pay", where
        if single_context and decided and m.best_gamma not in (None, 0):
            assert stats.num_speculative_tokens >= 1, where
        seen.add((m.verdict, "drafts" if stats.num_draft_tokens else "plain",
                  "auto" if m.best_gamma == "auto" else "0" if m.best_gamma == 0 else "fixed" if m.best_gamma else None))
    return seen


def head_run(controller, phases, seed=0) -> list[list[StepStats]]:
    """Turns of a model's drafts (one context) whose acceptance changes turn by turn."""
    rng = random.Random(seed)
    candidates = lambda: [Candidate("eagle3", 6)]  # noqa: E731
    controller.proposer = Stub(iter(candidates, None))
    turns = []
    for accept, steps in phases:
        controller.start_turn()
        turns.append([fake_step(controller, candidates, lambda c: accept, rng, prefill=i == 0) for i in range(steps)])
    return turns


def test_verdict_recommendation_and_auto_agree_on_a_models_drafts(tmp_path):
    # a turn where drafts pay, one where nothing is kept, and one where they pay again
    turns = head_run(AdaptiveGamma(6), [(0.8, 150), (0.0, 250), (0.8, 250)])
    seen = replay_and_check(write_recording(tmp_path / "head.jsonl", as_events(turns, "auto")), single_context=True)
    verdicts = {s[0] for s in seen}
    assert {None, "pays", "does not pay"} <= verdicts
    assert ("pays", "drafts", "auto") in seen and ("does not pay", "plain", "0") in seen


def test_a_fixed_gamma_is_told_the_gamma_that_pays(tmp_path):
    """With γ fixed at 6 and drafts kept half the time, the model recommends a shorter γ
    (a fixed γ, never "auto"), and says so with the verdict."""
    controller = FixedGamma(6)
    turns = head_run(controller, [(0.5, 200), (0.0, 100)])
    seen = replay_and_check(write_recording(tmp_path / "fixed.jsonl", as_events(turns, 6)), single_context=False)
    assert ("pays", "drafts", "fixed") in seen and ("does not pay", "drafts", "0") in seen
    assert not any(s[2] == "auto" for s in seen)


def ngram_run(phases, seed=1) -> list[list[StepStats]]:
    """n-gram lookup: a copy-heavy turn (long, agreed matches, mostly kept), an open one
    (rare one-token matches, rarely kept), and a copy-heavy one again."""
    rng = random.Random(seed)
    controller = AdaptiveGamma(8)
    state = {"copy": True}

    def candidates():
        if state["copy"]:
            return [Candidate("ngram", 8, NgramMatch(length=rng.choice([4, 8, 16]), agreeing=2))]
        return [Candidate("ngram", 3, NgramMatch(length=1))] if rng.random() < 0.3 else []

    def accept(candidate):
        return 0.9 if candidate.match.length >= 4 else 0.05

    queue = []

    def contexts():
        while True:
            queue.append(candidates())
            yield queue[-1]

    controller.proposer = Stub(contexts())
    turns = []
    for copy, steps in phases:
        state["copy"] = copy
        controller.start_turn()
        turn = []
        for i in range(steps):
            turn.append(fake_step(controller, lambda: queue[-1] if queue else [], accept, rng, prefill=i == 0))
        turns.append(turn)
    return turns


def test_verdict_recommendation_and_auto_agree_under_ngram_contexts(tmp_path):
    turns = ngram_run([(True, 150), (False, 300), (True, 150)])
    seen = replay_and_check(write_recording(tmp_path / "ngram.jsonl", as_events(turns, "auto")), single_context=False)
    assert ("pays", "drafts", "auto") in seen
    assert any(s[0] == "does not pay" for s in seen)  # the open turn's long stretch: auto decodes plainly


@pytest.mark.parametrize("method", ["ngram", "hybrid"])
def test_the_real_engine_never_contradicts_itself(tmp_path, target, method):
    """The real engine and controller on a tiny model, n-gram lookup or the hybrid
    (n-gram and a head), γ = auto; the recorded steps replay without a contradiction."""
    from tests.engine.proposers.test_hybrid import hybrid

    from specchat.engine import SpeculativeEngine
    from specchat.engine.backends.transformers import TransformersBackend
    from specchat.engine.proposers import NgramProposer
    from specchat.engine.sampling import SamplingParams

    if method == "ngram":
        backend, proposer = TransformersBackend(target), NgramProposer("auto", 1, 3, max_speculative_tokens=6)
    else:
        backend, proposer = hybrid(target)
    engine = SpeculativeEngine(backend, proposer, eos_token_ids=[])
    prompts = [[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3], [7, 11, 2, 9], [3, 3, 3, 3, 3, 3]]
    turns = [[step.stats for step in engine.generate(p, SamplingParams(temperature=0.8, seed=i), 120)]
             for i, p in enumerate(prompts)]
    assert any(s.recommended_gamma is not None for t in turns for s in t)  # the model did speak
    replay_and_check(write_recording(tmp_path / f"{method}.jsonl", as_events(turns, "auto")), single_context=False)
