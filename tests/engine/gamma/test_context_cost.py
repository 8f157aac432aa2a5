"""The cost model knows the context length (issue 43): a step's time grows with the
context it attends to, so a plain step timed hundreds of tokens ago must not be the
baseline of a drafting step now.

A fake clock where a plain step costs 5 + 0.01·L ms after L tokens and a step verifying
k drafts costs (1 + 0.2·k) times that: v(k) = 1 + 0.2·k at every context. A reply grows
from 200 to ~2,300 tokens, drafting 3 a step, with a plain step every 64 and wherever
the model says its plain steps ran too far from this context (as γ = auto does while
drafts pay). Asked before each step, as the engine asks it, once two plain steps have
shown how the time grows, the model's T(3)/w(0) must be v(3) = 1.6 and its w(3) the
step's time. Blind to the context
(every step filed as if at one length: the bug), the stale plain steps make T(3)/w(0)
read far above 1.6 at long context, so γ = auto would think drafting dearer than it is.
"""

from __future__ import annotations

import pytest

from specchat.engine.gamma.controller import AdaptiveGamma
from specchat.engine.gamma.cost_model import CostModel, plain_line
from specchat.engine.proposers import Candidate
from specchat.events import StepStats


def plain_ms(context: int) -> float:
    return 5.0 + 0.01 * context


def step_ms(k: int, context: int) -> float:
    return plain_ms(context) * (1.0 + 0.2 * k)


def reply(model, steps: int = 700, k: int = 3):
    """Runs the reply, asking ``model`` before each step as the engine does; yields
    (context, predicted w(k) in ms, predicted T(k)/w(0)) for its drafting steps."""
    context, plain = 200, []
    for i in range(steps):
        model.at(context)
        drafting = i % 64 != 1 and not model.plain_is_stale()
        if drafting and plain and plain[-1] - plain[0] >= 64 and model.w(k) is not None:
            yield context, model.w(k), model.w(k) / model.w(0)
        if not drafting:
            plain.append(context)
        n = k if drafting else 0
        model.observe(StepStats(n, n, n, total_ms=step_ms(n, context), context_tokens=context), ("", ()), "ngram")
        context += n + 1


@pytest.mark.parametrize("by_context", [True, False], ids=["knows-context", "context-blind"])
def test_a_drafting_steps_cost_is_predicted_at_its_own_context(by_context):
    predicted = list(reply(CostModel(8, by_context=by_context)))
    assert len(predicted) > 600 and predicted[-1][0] > 2000
    worst = max(abs(ratio / 1.6 - 1) for _, _, ratio in predicted)
    worst_ms = max(abs(w / step_ms(3, context) - 1) for context, w, _ in predicted)
    if by_context:
        assert worst < 0.01 and worst_ms < 0.01, (worst, worst_ms)
    else:  # the planted bug: the check above would catch it
        assert worst > 0.10, worst


def test_the_controllers_assessment_uses_the_context_of_its_step():
    """Through AdaptiveGamma as the engine asks it (choose → assess → observe): once two
    plain steps 64 tokens apart are timed, every drafting step's predicted cost is
    within 1 % of the truth."""

    class Always:
        drafting_model = ""

        def candidates(self, ids, limit):
            return [Candidate("ngram", limit)]

        def select(self, source):
            pass

    controller = AdaptiveGamma(4, Always())
    ids = [0] * 200
    errors = []
    for _ in range(600):
        gamma, _ = controller.choose(ids)
        k = min(gamma, 4)
        assessed = controller.assess(k, "ngram" if k else "")
        truth = step_ms(k, len(ids)) / plain_ms(len(ids))
        plain = {c for c, _ in controller.model.step_ms[0]} if 0 in controller.model.step_ms else set()
        if k and assessed.predicted_cost is not None and max(plain, default=0) - min(plain, default=0) >= 64:
            errors.append(abs(assessed.predicted_cost / truth - 1))
        stats = StepStats(gamma, k, k, total_ms=step_ms(k, len(ids)), draft_source="ngram" if k else "",
                          context_tokens=len(ids))
        controller.observe(stats, None)
        ids += [0] * (k + 1)
    assert len(ids) > 1500 and len(errors) > 200
    assert max(errors) < 0.01, max(errors)


def test_one_slow_plain_step_does_not_tilt_the_line():
    points = [(c, plain_ms(c)) for c in range(200, 1000, 100)] + [(1000, 3 * plain_ms(1000))]
    a, b = plain_line(points)
    assert a == pytest.approx(5.0) and b == pytest.approx(0.01)
    # closer than MIN_SPAN apart: no slope is read from them
    assert plain_line([(500, 10.0), (510, 12.0)]) == (11.0, 0.0)


def test_k_steps_timed_far_from_the_plain_steps_keep_v_sane():
    """Run 14 (T = 0 Spec-Bench): the plain steps of a summary, 1385-1502 tokens in, gave the
    line a slope of 0.026 ms a token (~5x the true one) and an intercept of -23 ms; the k = 8
    steps had been timed at 264-1458 tokens, in a translation, where that line is below zero,
    so v(8) read ~28,000 and a step was forecast at 28,327 plain steps (it took 2.8).
    Planted: v(8) from every k = 8 step, near or not (4.2), or a negative intercept."""
    plain = [(1385, 13.85), (1386, 13.4), (1392, 13.66), (1427, 13.96), (1428, 13.77), (1432, 14.39),
             (1441, 13.9), (1501, 16.46), (1502, 16.09)]
    eight = [(264, 28.65), (273, 28.9), (282, 28.82), (875, 28.33), (898, 50.57), (792, 33.19),
             (1079, 35.68), (1452, 39.44), (1458, 40.41)]
    a, b = plain_line(plain)
    assert a >= 0 and 0 <= b <= min(m / c for c, m in plain)
    model = CostModel(10)
    for k, points in ((0, plain), (8, eight)):
        for c, ms in points:
            model.observe(StepStats(k, k, 0, total_ms=ms, draft_source="ngram" if k else "", context_tokens=c),
                          ("ngram", ()), "ngram" if k else "")
    model.at(1556)
    v8 = model.w(8) / model.w(0)
    assert 2.5 < v8 < 3.2, v8  # measured there: 44.9 ms against a ~16 ms plain step (2.8)
