"""``specchat plan`` (specchat/plan.py): measured costs in, the panel's formula out.

* On the tiny model (a 512-token context: only the 256-token point fits): the JSON has the
  target's step times for k = 0..8, c, v(k), the α × γ table, each γ's break-even α (where
  the formula crosses 1) and the best γ per α (the row's largest, none below 1×).
* break_even against the closed form: with free drafts (c = 0) and v(γ) = 1 + γ/10, γ = 1
  pays once 1 + α > 1.1, i.e. above α = 0.1. A bisection turned the wrong way fails it.
* Bad input is one line: --repeats 0, a file that is no recording for --alpha-from.
"""

from __future__ import annotations

import json

import pytest

from specchat.plan import Costs, break_even, report
from specchat.telemetry import predicted_speedup


def costs(c: float, slope: float) -> Costs:
    return Costs({256: [10.0 * (1 + slope * k) for k in range(9)]}, 10.0 * c, "test")


def test_break_even_is_where_the_formula_crosses_one():
    assert break_even(costs(0.0, 0.1), 256, 1) == pytest.approx(0.1, abs=1e-6)
    for c, slope in ((0.05, 0.1), (0.3, 0.05), (0.0, 0.5)):
        for gamma in range(1, 9):
            a = break_even(costs(c, slope), 256, gamma)
            if a is not None:
                assert predicted_speedup(a, gamma, c, 1 + slope * gamma) == pytest.approx(1.0, abs=1e-6)
    assert break_even(costs(2.0, 1.0), 256, 1) is None  # a draft dearer than what it can save


def test_the_best_gamma_is_the_rows_largest_and_none_below_one():
    figures = report(costs(0.05, 0.1))["contexts"]["256"]
    for row, best in zip(figures["speedup"], figures["best_gamma"]):
        assert best == (row.index(max(row)) + 1 if max(row) > 1 else 0)


def test_plan_measures_the_tiny_model_and_prints_json(tiny_ngram_profile_path, capsys):
    from specchat.cli import main

    assert main(["plan", "--profile", str(tiny_ngram_profile_path), "--repeats", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert list(figures["contexts"]) == ["256"]  # 1,024 and 4,096 do not fit a 512-token context
    f = figures["contexts"]["256"]
    assert len(f["step_ms"]) == 9 and all(t > 0 for t in f["step_ms"]) and f["v"][0] == 1.0
    assert len(f["speedup"]) == len(f["alphas"]) and all(len(row) == 8 for row in f["speedup"])
    assert figures["source"] == "ngram" and figures["draft_ms"] >= 0


@pytest.mark.parametrize("argv, says", [
    (["--repeats", "0"], "--repeats 0 is out of range"),
    (["--alpha-from", __file__], "not a specchat recording"),
])
def test_bad_input_is_one_line(tiny_ngram_profile_path, capsys, argv, says):
    from specchat.cli import main

    assert main(["plan", "--profile", str(tiny_ngram_profile_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
