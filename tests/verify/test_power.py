"""The power verify prints beside its checks (verify_stats.chi2_power): the χ² rule's
rejection rate under a named bug's exact law, and the mildest fraction of that bug's
error still caught with 90 % power — checked against a seeded simulation."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.verify import stats as verify_stats
from specchat.verify.stats import chi2_power, goodness_of_fit

P = [0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.04, 0.03, 0.02, 0.02]
N = 2000
EXACT = dict(enumerate(P))


@pytest.mark.parametrize("moved", [40, 70])
def test_power_is_the_chi_square_rules_rejection_rate_under_the_bug(moved):
    """chi2_power (printed beside verify's checks) against a simulation: samples drawn from
    the "bug" law (``moved`` of 2000 draws' worth of mass shifted) fail the χ² rule at the
    rate it predicts, within 0.08 (400 seeded runs: binomial sd ≤ 0.025)."""
    bug = list(P)
    bug[0] += moved / N
    bug[1] -= moved / N
    power, scale = chi2_power(P, bug, N)
    rng = np.random.default_rng(7)
    runs = 400
    failed = sum(goodness_of_fit("x", rng.choice(len(P), size=N, p=bug), EXACT).p_value < verify_stats.ALPHA
                 for _ in range(runs))
    assert abs(failed / runs - power) < 0.08, (failed / runs, power)
    # a fraction `scale` of the bug's error is caught with 90 % power
    mild = [p + scale * (b - p) for p, b in zip(P, bug)]
    assert chi2_power(P, mild, N)[0] == pytest.approx(0.9, abs=1e-6)


def test_a_checks_power_counts_its_pooled_cell():
    """goodness_of_fit(bug=...) judges the bug over the check's own cells: cells expected
    under 5 times are pooled, and mass the bug moves between two pooled cells is invisible."""
    tail = [0.001] * 10  # 2 expected draws each at N: one pooled cell
    exact = dict(enumerate([p - 0.001 for p in P] + tail))
    inside = dict(exact)
    inside[10], inside[11] = 0.0, 0.002  # moved within the pooled cell
    sample = np.repeat(np.arange(len(exact)), [round(N * p) for p in exact.values()])
    check = goodness_of_fit("x", sample, exact, bug=("moved inside the pool", inside))
    assert check.cells == 11 and check.power == 0.0 and check.power_scale is None
    outside = dict(exact)
    outside[0], outside[10] = exact[0] + 0.001, 0.0  # from the pool to the likeliest cell
    check = goodness_of_fit("x", sample, exact, bug=("moved out of the pool", outside))
    expected_cells = [p for p in exact.values() if p * N >= 5] + [0.01]
    bug_cells = [outside[k] for k, p in exact.items() if p * N >= 5] + [0.009]
    assert check.power == pytest.approx(chi2_power(expected_cells, bug_cells, N)[0])
    assert "power" in check.line() and "moved out of the pool" in check.line()
