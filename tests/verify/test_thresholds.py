"""``specchat verify``'s decision thresholds, pinned by behaviour: a bias of known size
that the rule as documented catches (χ² p < ALPHA = 1e-3, or TV above the 99.9th
percentile of an exact sampler's TV) and that a rule loosened 10× would wave through.
Planted once each (issue 30's report): α loosened to 1e-4 or 1e-5, the TV thresholds ×10,
×100 or ×1.15, and the TV quantile tightened to 99 % each fail a test here. The quantile
loosened to 99.99 % does not, and cannot: with NULL_DRAWS = 1000 the 99.9th and 99.99th
percentiles are the top two of 1000 simulated TVs, equal here (0.0495); the rule's
realised false-alarm rate is what test_the_tv_threshold_is... pins. The counts are
constructed, not sampled, and the null simulations are seeded: nothing here is random,
so there are no false alarms. The exact-law check's bound (verify_law.LAW_BOUND, 2e-6 in TV)
is pinned the same way, by a planted residual error whose TV lies between it and ten times it.

The sample: 2000 draws over ten cells (expected counts 40 to 600), verify's default size."""

from __future__ import annotations

import numpy as np
import torch

from specchat.engine.sampling import SamplingParams
import specchat.engine.sampling as sampling
from specchat.verify import stats as verify_stats
from specchat.verify.law import LAW_BOUND, healthy_tv, law_checks
from specchat.verify.stats import goodness_of_fit, two_sample
from tests.support.mutations import leaky_residual, patched

P = [0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.04, 0.03, 0.02, 0.02]
N = 2000
EXACT = dict(enumerate(P))


def codes(counts: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


def shifted(moved: int) -> list[int]:
    """The expected counts with ``moved`` draws taken from the likeliest cell to the next."""
    counts = [round(N * p) for p in P]
    counts[0] += moved
    counts[1] -= moved
    return counts


def test_exact_counts_pass():
    """The other side of every pin below: a sample that matches p passes both rules."""
    check = goodness_of_fit("exact", codes(shifted(0)), EXACT)
    assert check.passed and check.p_value > 0.99 and check.tv == 0.0


def test_the_chi_square_rule_catches_a_bias_between_alpha_and_a_tenth_of_it():
    """85 of 2000 draws moved (TV 0.0425, under the TV threshold 0.0495): χ² p = 4.2e-4.
    α = 1e-3 fails it; α loosened to 1e-4 would pass it."""
    check = goodness_of_fit("biased", codes(shifted(85)), EXACT)
    assert check.tv < check.tv_threshold, check.line()  # the χ² rule alone decides
    assert 1e-4 < check.p_value < 1e-3
    assert not check.passed, check.line()


def test_the_tv_rule_alone_catches_a_bias_just_past_the_exact_samplers_99_9th_percentile(monkeypatch):
    """With the χ² rule switched off, 105 draws moved (TV 0.0525) fail on TV: the 99.9th
    percentile of an exact sampler's TV at this size is 0.048–0.0495 (seeded simulation, and
    an independent one below); a threshold 1.15× or 10× as wide would pass it."""
    monkeypatch.setattr(verify_stats, "ALPHA", 0.0)
    check = goodness_of_fit("biased", codes(shifted(105)), EXACT)
    assert not check.passed, check.line()


def test_the_tv_threshold_is_an_exact_samplers_99_9th_percentile():
    """The threshold's false-alarm rate, measured on 200 000 independent exact samples:
    between 0.02 % and 0.5 % (documented: 0.1 %; measured 0.049 %). A quantile of 99 %
    (1.4 %) or a threshold ×1.15 falls outside."""
    threshold = goodness_of_fit("exact", codes(shifted(0)), EXACT).tv_threshold
    draws = np.random.default_rng(1).multinomial(N, P, size=200_000) / N
    tvs = 0.5 * np.abs(draws - np.array(P)).sum(axis=1)
    rate = float((tvs > threshold).mean())
    assert 2e-4 <= rate <= 5e-3, rate


def test_the_two_sample_chi_square_rule_catches_a_bias_between_alpha_and_a_tenth_of_it():
    """Speculative vs plain: 115 of 2000 moved in one sample (TV 0.0575, under the permutation
    threshold ≈ 0.065): χ² p between 1e-4 and 1e-3, a FAIL at α = 1e-3, a PASS at 1e-4."""
    check = two_sample("biased", codes(shifted(115)), codes(shifted(0)))
    assert check.tv < check.tv_threshold, check.line()
    assert 1e-4 < check.p_value < 1e-3
    assert not check.passed, check.line()


def test_the_two_sample_tv_rule_alone_catches_a_bias_past_its_permutation_threshold(monkeypatch):
    monkeypatch.setattr(verify_stats, "ALPHA", 0.0)
    assert two_sample("same", codes(shifted(0)), codes(shifted(0))).passed
    check = two_sample("biased", codes(shifted(140)), codes(shifted(0)))  # TV 0.07
    assert not check.passed, check.line()


def test_the_exact_law_bound_catches_a_residual_error_between_it_and_ten_times_it():
    """p: the ten cells above; q: 0.05 moved from each of the two likeliest to the two least
    likely, so a draft is rejected with probability 0.1 and the residual is half on each of
    the two. With 1e-4 of the residual moved (tests/support/mutations.py, leaky_residual) the first
    token's exact law is off by 1e-4 · 0.1 = 1e-5 in TV: past LAW_BOUND = 2e-6, inside a
    bound ten times as loose. Healthy, the same rows read within healthy_tv (float32
    rounding over 10 ids) of p, and the planted error within it of 1e-5."""
    p = torch.tensor(P, dtype=torch.float32)
    q = p + torch.tensor([-0.05, -0.05] + [0.0] * 6 + [0.05, 0.05])
    read = lambda: law_checks(p.log(), p, q, None, SamplingParams(temperature=1.0))  # noqa: E731
    [healthy] = read()
    assert healthy.passed and healthy.extra["tv"] < healthy_tv(10), healthy.line()
    with patched(sampling, "residual_distribution", leaky_residual(sampling.residual_distribution)):
        [planted] = read()
    assert abs(planted.extra["tv"] - 1e-5) < healthy_tv(10), planted.line()
    assert LAW_BOUND < planted.extra["tv"] < 10 * LAW_BOUND
    assert not planted.passed and "largest error at token" in planted.detail, planted.line()
    assert planted.extra["largest"]["token"] in (0, 1)  # the mass left one and reached the other
