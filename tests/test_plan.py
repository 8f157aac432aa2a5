"""``specchat plan`` (specchat/plan.py; its pricing is engine/gamma/cost_model.py's MeasuredCosts).

* On the tiny model (a 512-token context: only the 256-token point fits): the JSON has the
  target's step times for k = 0..8, c, v(k), the α × γ table, each γ's break-even α (where
  the formula crosses 1) and the best γ per α (the row's largest, none below 1×).
* break_even against the closed form: with free drafts (c = 0) and v(γ) = 1 + γ/10, γ = 1
  pays once 1 + α > 1.1, i.e. above α = 0.1. A bisection turned the wrong way fails it.
* as_run prices a task's steps as run with these costs, exactly: each step's kept + 1
  tokens against plain steps at the same context, its drafts' time and its verify step's
  (costs on the line between measured contexts, the nearest one's outside them). Pricing
  every step at one context, or leaving the drafting out, fails it.
* The text prints a measured α's best γ off the same formula (not the table's first α).
* --alpha-from takes bench's results.json: per configuration and set, its α and its steps
  as run, each request's prompt step left out.
* Bad input is one line: --repeats 0, a file that is no recording for --alpha-from, a
  JSON file that is no bench results.
"""

from __future__ import annotations

import json

import pytest

from specchat.engine.gamma.cost_model import MeasuredCosts
from specchat.plan import CONTEXTS, Drafting, draft_costs, report, task_contexts
from specchat.telemetry import predicted_speedup


def costs(c: float, slope: float) -> MeasuredCosts:
    return MeasuredCosts({256: [10.0 * (1 + slope * k) for k in range(9)]}, {256: 10.0 * c}, "test")


def test_break_even_is_where_the_formula_crosses_one():
    assert costs(0.0, 0.1).break_even(256, 1) == pytest.approx(0.1, abs=1e-6)
    for c, slope in ((0.05, 0.1), (0.3, 0.05), (0.0, 0.5)):
        for gamma in range(1, 9):
            a = costs(c, slope).break_even(256, gamma)
            if a is not None:
                assert predicted_speedup(a, gamma, c, 1 + slope * gamma) == pytest.approx(1.0, abs=1e-6)
    assert costs(2.0, 1.0).break_even(256, 1) is None  # a draft dearer than what it can save


def test_the_best_gamma_is_the_rows_largest_and_none_below_one():
    figures = report(costs(0.05, 0.1))["contexts"]["256"]
    for row, best in zip(figures["speedup"], figures["best_gamma"]):
        assert best == (row.index(max(row)) + 1 if max(row) > 1 else 0)


def test_the_text_reads_a_measured_alpha_off_the_same_formula():
    # c = 0.05, v(γ) = 1 + γ/10: at α = 0.7, E(γ) / (1 + 0.15γ) is 1.48, 1.68, 1.75, 1.73, … (best γ = 3)
    from specchat.commands.plan import render

    figures = report(costs(0.05, 0.1)) | {"profile": "p", "target": "t", "precision": "bf16",
                                          "measured": [{"config": "ngram", "set": "open", "alpha": 0.7, "as_run": 1.5}]}
    text = render(figures)
    assert "at ngram on open's α = 0.70 (geometric): best γ = 3, 1.75×" in text and "ngram on open: 1.50×" in text


def test_as_run_prices_each_step_at_its_own_context():
    # plain 10 ms at 256 tokens and 20 ms at 1,024; each draft verified adds 2 (4) ms; drafting 1 (3) ms a draft
    measured = MeasuredCosts({256: [10.0 + 2 * k for k in range(9)], 1024: [20.0 + 4 * k for k in range(9)]},
                     {256: 1.0, 1024: 3.0}, "test")
    # 4 drafts all kept at 256; 4 drafts none kept at 640 (halfway: plain 15, +3 a draft, 2 ms drafting); plain at 2,000
    steps = [(256, 4, 4), (640, 4, 0), (2000, 0, 0)]
    plain = 5 * 10.0 + 1 * 15.0 + 1 * 20.0
    spec = (10.0 + 8 + 4 * 1.0) + (15.0 + 12 + 4 * 2.0) + 20.0
    assert measured.as_run(steps) == pytest.approx(plain / spec)
    assert measured.as_run([(100, 2, 1)]) == pytest.approx(2 * 10.0 / (14.0 + 2.0))  # below 256: 256's costs
    assert measured.as_run([(256, 10, 10)]) == pytest.approx(11 * 10.0 / (30.0 + 10.0))  # k > 8: on the line
    assert measured.as_run([]) is None


def test_plan_prices_a_step_as_gamma_autos_cost_model_does():
    """One cost model: at a timed context, plan's c, v(k) and T(k) (k beyond the timed ones
    included) are the controller's for the same times. Planted bug: plan extrapolating k on
    a line of its own (through the last two timed k, which the slow k = 8 here tilts)."""
    from specchat.engine.gamma.cost_model import CostModel
    from specchat.events import StepStats

    verify = [10.0 + 2 * k for k in range(8)] + [40.0]  # k = 8 timed slow
    measured = MeasuredCosts({256: verify}, {256: 1.5}, "draft")
    model = CostModel(16, by_context=False)
    for k, ms in enumerate(verify):
        model.time(StepStats(k, k, 0, draft_ms=1.5 * k, total_ms=ms + 1.5 * k), "draft")
    c, v = model.ratios("draft")
    assert measured.c(256) == pytest.approx(c) and [measured.v(256, k) for k in range(1, 9)] == pytest.approx(v)
    times = [f[1] for f in model.forecast([1.0] * 16, "draft")]
    assert [measured.step(256, k)[1] for k in range(17)] == pytest.approx(times)


def test_as_run_charges_a_missed_lookup_on_the_steps_that_drafted_nothing():
    # a lookup that misses costs 0.5 ms: paid on γ = auto's plain steps, never by plain decoding
    measured = MeasuredCosts({256: [10.0 + 2 * k for k in range(9)]}, {256: 1.0}, "test", lookup_ms=0.5)
    assert measured.as_run([(256, 0, 0), (256, 2, 2)]) == pytest.approx((1 + 3) * 10.0 / (10.5 + 14.0 + 2.0))
    assert MeasuredCosts.from_report(report(measured)).lookup_ms == 0.5  # kept through plan --json


def test_as_run_charges_each_side_its_time_outside_the_steps():
    # plain decoding's bookkeeping 0.2 ms a step, speculation's 0.6 ms: per token on one side, per step on the other
    measured = MeasuredCosts({256: [10.0 + 2 * k for k in range(9)]}, {256: 1.0}, "test", outside_ms=(0.2, 0.6))
    assert measured.as_run([(256, 2, 2)]) == pytest.approx(3 * 10.2 / (14.0 + 2.0 + 0.6))
    assert MeasuredCosts.from_report(report(measured)).outside_ms == (0.2, 0.6)


def test_c_is_the_draft_over_a_plain_step_timed_in_one_reply_held_across_contexts():
    # the real pair: 20.8 ms a draft and 27.4 ms a plain step, both after ~60 tokens; the
    # target's plain step after 256 tokens took 32.4 ms. c is 0.76 there, not 20.8 / 32.4
    steps = {256: [32.4, 47.6], 1024: [40.0, 60.0]}
    costs = MeasuredCosts(steps, draft_costs(Drafting(20.8, 0.0, 0.1, 0.0), Drafting(0.0, 0.0, 0.1, 27.4), steps),
                          "draft_model")
    assert costs.c(256) == pytest.approx(20.8 / 27.4) and costs.c(1024) == pytest.approx(20.8 / 27.4)
    no_plain_time = draft_costs(Drafting(20.8, 0.0, 0.1), Drafting(0.0, 0.0, 0.1), steps)
    assert no_plain_time == {256: 20.8, 1024: 20.8}  # the draft's time as measured


def test_plan_also_times_where_a_tenth_of_the_task_ran_below_its_least_context():
    steps = [(c, 1, 0) for c in range(60, 260)]  # a tenth below 80
    assert task_contexts(CONTEXTS, steps) == (64, *CONTEXTS)
    assert task_contexts(CONTEXTS, [(300, 1, 0)] * 10) == CONTEXTS  # within what is timed: the line holds
    assert task_contexts(CONTEXTS, [(20, 1, 0)] * 10) == CONTEXTS  # too short to time apart from a prompt
    assert task_contexts(CONTEXTS, []) == CONTEXTS


def test_plan_measures_the_tiny_model_and_prints_json(tiny_ngram_profile_path, capsys, tmp_path):
    import dataclasses

    from specchat.cli import main
    from specchat.events import StepStats

    def row(config, set_name, steps):
        return {"config": config, "set": set_name, "steps": [dataclasses.asdict(StepStats(*s[:3], prefill_tokens=s[3],
                                                                                          context_tokens=300))
                                                             for s in steps]}

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"rows": [row("ngram γ=auto", "open", [(0, 0, 0, 20), (3, 3, 3, 0), (0, 0, 0, 0)]),
                                            row("ngram γ=auto", "code", [(2, 2, 0, 0)]),
                                            row("none", "open", [(0, 0, 0, 20), (0, 0, 0, 0)])],
                                   "aggregates": {"sets": {"open": {"ngram γ=auto": {"alpha": 0.75}}}}}))
    assert main(["plan", "--profile", str(tiny_ngram_profile_path), "--repeats", "1", "--json",
                 "--alpha-from", str(results)]) == 0
    captured = capsys.readouterr()
    figures = json.loads(captured.out)
    # minutes of timing on a large model, each step said as it ends (issue 59: 14 silent minutes)
    said = [line for line in captured.err.splitlines() if line.startswith("plan: context 256 (1/1), k = ")]
    assert [line.split(", k = ")[1].split(" of")[0] for line in said] == [str(k) for k in range(9)]
    assert captured.err.startswith("plan: loading ")
    assert list(figures["contexts"]) == ["256"]  # 1,024 and 4,096 do not fit a 512-token context
    f = figures["contexts"]["256"]
    assert len(f["step_ms"]) == 9 and all(t > 0 for t in f["step_ms"]) and f["v"][0] == 1.0
    assert len(f["speedup"]) == len(f["alphas"]) and all(len(row) == 8 for row in f["speedup"])
    assert figures["source"] == "ngram" and figures["draft_ms"] >= 0
    measured = {(m["config"], m["set"]): m for m in figures["measured"]}
    assert set(measured) == {("ngram γ=auto", "open"), ("ngram γ=auto", "code"), ("ngram γ=auto", "all")}
    assert measured[("ngram γ=auto", "open")]["alpha"] == 0.75 and measured[("ngram γ=auto", "code")]["alpha"] is None
    costs = MeasuredCosts.from_report(figures)  # the prompt step left out: two steps priced
    assert measured[("ngram γ=auto", "open")]["as_run"] == pytest.approx(costs.as_run([(300, 3, 3), (300, 0, 0)]))
    assert measured[("ngram γ=auto", "all")]["as_run"] == pytest.approx(
        costs.as_run([(300, 3, 3), (300, 0, 0), (300, 2, 0)]))


@pytest.mark.parametrize("argv, says", [
    (["--repeats", "0"], "--repeats 0 is out of range"),
    (["--alpha-from", __file__], "not a specchat recording"),
])
def test_bad_input_is_one_line(tiny_ngram_profile_path, capsys, argv, says):
    from specchat.cli import main

    assert main(["plan", "--profile", str(tiny_ngram_profile_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("text", ['{"rows": [{"config": "x"}]}', '{"rows": [{"config": "a", "set": "b", '
                                  '"steps": [{"num_speculative_tokens": 1, "num_draft_tokens": -1, '
                                  '"num_accepted_tokens": 0}]}]}', "[1, 2", '{"rows": []}',
                                  pytest.param('{"rows": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                               id="nested-too-deeply")])
def test_a_json_that_is_no_bench_results_is_one_line(tiny_ngram_profile_path, capsys, tmp_path, text):
    from specchat.cli import main

    (tmp_path / "r.json").write_text(text)
    assert main(["plan", "--profile", str(tiny_ngram_profile_path), "--alpha-from", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert str(tmp_path / "r.json") in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("name", ["results.json", "chat.jsonl"])
def test_alpha_from_a_fifo_is_one_line_not_a_wait_forever(tiny_ngram_profile_path, capsys, tmp_path, name):
    """A FIFO is checked before it is opened, as a recording path is (issue 59, item 7).
    Planted bug: no ``is_file`` check — plan waits for a writer forever; here a writer
    thread feeds the FIFO so the planted run ends (with the wrong words) instead of hanging."""
    from specchat.cli import main
    from tests.support.fifo import fed_fifo

    with fed_fifo(tmp_path / name, b"not json") as fifo:
        assert main(["plan", "--profile", str(tiny_ngram_profile_path), "--alpha-from", str(fifo)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(fifo) in err, err
    assert "not a regular file" in err, err  # not "no such recording": the file is there
