"""Every telemetry formula against hand-computed values (telemetry.py's docstring gives
the definitions), and the measured speed-up after a long prompt."""

from __future__ import annotations

import pytest

from specchat.events import DraftCounts, StepStats
from specchat.telemetry import (
    Telemetry,
    arithmetic_increase,
    expected_tokens_per_round,
    predicted_speedup,
)

approx = pytest.approx


def test_closed_forms():
    assert expected_tokens_per_round(0.5, 3) == approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens_per_round(1.0, 3) == 4.0 and expected_tokens_per_round(0.9, 0) == 1.0
    assert predicted_speedup(0.5, 3, 0.1) == approx(1.875 / 1.3)  # the paper's E / (γc + 1)
    assert predicted_speedup(0.5, 3, 0.1, 1.6) == approx(1.875 / 1.9)  # E / (γc + v)
    assert arithmetic_increase(0.5, 3, 0.1) == approx(0.5 * 4.3 / 0.9375)
    assert arithmetic_increase(1.0, 3, 0.1) == approx(4.3 / 4)


def scenario() -> Telemetry:
    """A turn: a step that also ran a 100-token prompt, plain steps, and three drafting
    steps (k = 2, 2, 4; kept 1, 2, 0). Times in ms."""
    t = Telemetry(max_gamma=4)
    t.start_turn()
    steps = [
        (StepStats(0, 0, 0, verify_ms=200, total_ms=205, prefill_ms=5, prefill_tokens=100), 1),
        (StepStats(0, 0, 0, verify_ms=10, total_ms=11), 1),
        (StepStats(2, 2, 1, alpha_sum=1.4, alpha_count=2, draft_forwards=2, draft_ms=2.0, verify_ms=15,
                   total_ms=18), 2),
        (StepStats(0, 0, 0, verify_ms=20, total_ms=21), 1),
        (StepStats(2, 2, 2, alpha_sum=1.8, alpha_count=2, draft_forwards=2, draft_ms=2.6, verify_ms=19.5,
                   total_ms=23, cost_ratio=0.12, verify_cost=(1.2, 1.5)), 3),
        (StepStats(4, 4, 0, alpha_sum=0.3, alpha_count=1, draft_forwards=4, draft_ms=4.4, verify_ms=26,
                   total_ms=31, predicted_gain=1.2, cost_ratio=0.1, verify_cost=(1.2, 1.5, 1.8, 2.0)), 1),
    ]
    for stats, tokens in steps:
        t.update(stats, tokens)
    return t


def test_counts_and_acceptance():
    m = scenario().snapshot()
    assert (m.num_steps, m.num_tokens, m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens) == (6, 9, 3, 8, 3)
    assert m.acceptance_histogram == (1, 1, 1, 0, 0)
    assert m.per_position_acceptance == approx((2 / 3, 1 / 3, 0.0, 0.0))
    assert m.mean_acceptance_length == approx(1 + 3 / 3)
    assert m.draft_acceptance_rate == approx(3 / 8)
    assert m.alpha == approx(3.5 / 5)  # Σ alpha_sum / Σ alpha_count
    assert m.alpha_empirical == approx(3 / 5)  # kept / verified positions (2 + 2 + 1)
    assert m.gamma == approx(8 / 3) and m.last_gamma == 4 and m.predicted_gain == 1.2
    assert m.gamma_history == (0, 0, 2, 0, 2, 4) and m.acceptance_history == approx((0.5, 1.0, 0.0))


def test_draft_counts_fold_chains_and_trees_and_say_none_without_drafts():
    """The one fold of the draft counters (serve, bench and verify use it too). Planted bug:
    a rate read as 0.0 where nothing was drafted, as the panel's once was."""
    counts = DraftCounts()
    counts.add(StepStats(0, 0, 0))
    assert (counts.draft_acceptance_rate, counts.mean_acceptance_length, counts.per_position_acceptance) == (
        None, None, ())
    plain = Telemetry()
    plain.update(StepStats(0, 0, 0, verify_ms=10, total_ms=11), 1)
    assert plain.snapshot().draft_acceptance_rate is None and plain.snapshot().mean_acceptance_length is None
    # chains of 2 that kept 1 and 2, and a γ = 3 tree of 9 nodes that kept 1 and rejected the next
    for stats in (StepStats(2, 2, 1), StepStats(2, 2, 2), StepStats(3, 9, 1, verified_positions=2)):
        counts.add(stats)
    assert (counts.num_drafts, counts.num_draft_tokens, counts.num_accepted_tokens, counts.num_rejected) == (3, 13, 4, 2)
    assert counts.acceptance_histogram == [0, 2, 1] and counts.accepted_per_position == [3, 1]
    assert counts.drafted_per_position == [3, 3, 1]  # the tree at its 3 depths, not its 9 nodes
    assert counts.per_position_acceptance == approx((1.0, 1 / 3, 0.0))
    assert counts.draft_acceptance_rate == approx(4 / 13) and counts.mean_acceptance_length == approx(1 + 4 / 3)


def test_c_and_v_are_the_cost_model_s_as_of_the_latest_step_that_drafted():
    t = scenario()
    m = t.snapshot()
    assert m.target_token_ms == approx(15.0)  # median of the plain verifications 10, 20 (prompt step excluded)
    assert m.draft_forward_ms == approx(1.1)  # median of 1.0, 1.3, 1.1 per forward
    # what γ = auto decided with (StepStats carries it), not a second estimate of this fold's
    assert m.cost_ratio == approx(0.1)
    assert m.verify_cost == {1: approx(1.2), 2: approx(1.5), 3: approx(1.8), 4: approx(2.0)}
    t.update(StepStats(0, 0, 0, verify_ms=12, total_ms=13), 1)  # a plain step leaves them as they were
    assert t.snapshot().cost_ratio == approx(0.1) and t.snapshot().verify_cost[4] == approx(2.0)


def test_the_panel_s_c_and_v_are_the_ones_gamma_auto_decides_with():
    """A controller that timed plain steps at 20 ms, 2-draft steps at 30 ms and 4-draft steps
    at 44 ms (after 5 ms a draft): the step it assesses next carries c = 5/20 and v(2) = 1.5,
    v(4) = 2.2, and the fold shows exactly those."""
    from specchat.engine import epilogue
    from specchat.engine.gamma.controller import AdaptiveGamma

    controller = AdaptiveGamma(4)
    for k, ms in [(0, 20.0), (2, 30.0), (0, 20.0), (4, 44.0), (2, 30.0), (4, 44.0)]:
        controller.model.at(100)
        controller.observe(StepStats(k, k, k, draft_ms=5.0 * k, total_ms=ms + 5.0 * k, context_tokens=100,
                                     draft_source="draft_model" if k else ""), None)
    assessed = controller.assess(2, "draft_model")
    assert assessed.cost_ratio == approx(5 / 20)
    # measured at 2 and 4; elsewhere on the least-squares line through v(0) = 1, v(2), v(4): slope 0.3
    assert assessed.verify_cost == approx((4.7 / 3 - 0.3, 1.5, 4.7 / 3 + 0.3, 2.2))
    t = Telemetry(max_gamma=4)
    t.update(epilogue.stats(2, 2, 1, 0.9, assessed, draft_ms=10.0, total_ms=40.0), 2)
    m = t.snapshot()
    assert m.cost_ratio == approx(5 / 20) and tuple(m.verify_cost.values()) == assessed.verify_cost


def test_predictions():
    """The paper's figures from α and c; the cost model's (predicted speed-up as run,
    recommended γ, verdict) are its per-step forecasts added up and relayed, not recomputed."""
    m = scenario().snapshot()
    alpha, c = 0.7, 0.1
    e3 = 1 + alpha + alpha**2 + alpha**3
    assert m.expected_tokens_per_round == approx(e3)  # γ = round(8/3) = 3
    assert m.predicted_speedup_paper == approx(e3 / (3 * c + 1))
    assert m.breakeven is True and m.speedup_lower_bound == approx((1 + alpha) / (1 + c))
    assert m.arithmetic_increase == approx((1 - alpha) * (3 * c + 3 + 1) / (1 - alpha**4))
    # no step carried a forecast: nothing is predicted, and the verdict waits
    assert m.predicted_speedup is None and m.best_gamma is None and m.verdict is None

    t = Telemetry(max_gamma=4)
    t.start_turn()
    forecasts = [  # (stats, tokens): the prompt's step, whose forecast is no timing sample, then three
        (StepStats(2, 2, 1, total_ms=200, prefill_tokens=50, predicted_tokens=9.0, predicted_cost=1.0), 2),
        (StepStats(0, 0, 0, total_ms=10, predicted_tokens=1.0, predicted_cost=1.0, recommended_gamma=2,
                   recommended_gain=1.3), 1),
        (StepStats(2, 2, 2, total_ms=14, predicted_tokens=2.2, predicted_cost=1.5), 3),
        (StepStats(3, 3, 0, total_ms=16, predicted_tokens=2.5, predicted_cost=1.8, recommended_gamma=0,
                   recommended_gain=0.9), 1),
    ]
    for stats, tokens in forecasts[:3]:
        t.update(stats, tokens)
    m = t.snapshot()
    assert m.predicted_speedup == m.predicted_speedup_steps == approx((1.0 + 2.2) / (1.0 + 1.5))
    assert (m.best_gamma, m.recommended_gain, m.verdict) == (2, 1.3, "pays")  # a step without one keeps the last
    t.update(*forecasts[3])
    m = t.snapshot()
    assert (m.best_gamma, m.recommended_gain, m.verdict) == (0, 0.9, "does not pay")
    assert m.predicted_speedup == approx((1.0 + 2.2 + 2.5) / (1.0 + 1.5 + 1.8))


def test_rates_and_measured_speedup_leave_the_prefill_out():
    m = scenario().snapshot()
    assert m.tokens_per_s == approx(9 / 0.309)
    assert m.plain_tokens_per_s == approx(1000 / 16)  # mean of the plain steps 11 and 21 ms
    assert m.measured_speedup == approx((8 / 0.104) / (1000 / 16))  # 8 tokens in 104 ms: the prompt's step left out
    assert m.ttft_ms == approx(5 + 205)


def test_a_drafting_step_that_caught_up_is_no_cost_sample():
    t = scenario()
    t.update(StepStats(2, 2, 2, alpha_sum=2, alpha_count=2, draft_forwards=2, draft_ms=90.0, verify_ms=19.5,
                       total_ms=110, draft_catch_up_tokens=80), 3)
    m = t.snapshot()
    assert m.draft_forward_ms == approx(1.1)


def test_plain_decoding_after_a_long_prompt_reports_no_speedup():
    """Plain decoding alone after a 1,500-token prompt: measured speed-up 1.0× (it was
    0.21× when the turn's rate, prefill included, was held against plain steps)."""
    from tests.support.folded import FoldedEngine
    from specchat.engine import SamplingParams
    from tests.support.vocab16 import tiny_lm

    model = tiny_lm(0, max_positions=2048)
    engine = FoldedEngine(model, None, eos_token_ids=[], cpu_share=quiet_machine())
    prompt = [i % 16 for i in range(1500)]
    steps = list(engine.generate(prompt, SamplingParams(temperature=0), max_new_tokens=40))
    m = engine.turn_metrics
    assert len(steps) == 40 and steps[0].stats.prefill_tokens == 1499
    assert m.measured_speedup == approx(1.0)  # 39 plain steps: the same steps on both sides
    assert m.tokens_per_s < m.measured_speedup * m.plain_tokens_per_s  # the turn's own rate does include the prompt


def quiet_machine():
    """A CpuShare that reads a machine where nothing else runs (the suite's other worker
    would otherwise count as a busy neighbour)."""
    import time

    from specchat.contention import CpuShare

    return CpuShare(read=lambda: (time.process_time(), time.process_time(), time.perf_counter()), cpus=2)
