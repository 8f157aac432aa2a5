"""Holds `specchat plan`'s prediction against what `specchat bench` then measured (issue 44).

plan measures only costs (the target's v(k), the proposer's c) and predicts the speed-up
over the task's α; bench measures α. So, per prompt set, this takes from bench's run of a
method the two things that belong to the task — α, and the share m of steps that had
drafts at all (n-gram lookup drafts nothing without a match: those steps are plain) — and
reads plan's formula at them, with plan's best γ for that α (and, beside it, at the mean
number of drafts bench's steps had: lookup drafts only as far as its match goes) and
plan's costs at the context nearest the set's mean context:

    predicted = (m·E(γ) + 1 − m) / (m·(γ·c + v(γ)) + 1 − m),  E(γ) = (1 − α^(γ+1)) / (1 − α)

and, last, bench's steps as run (each one's context, drafts and drafts kept: the task's
acceptance as it came, not a geometric α) priced with plan's costs (MeasuredCosts.as_run,
specchat/engine/gamma/cost_model.py: what `plan --alpha-from results.json` prints), all
held against bench's measured speed-up over our plain decoding, both of decoding alone
(each request's prompt step left out of both rows' time and tokens: plan knows nothing
of prompts) and end to end as bench reports it.

    specchat plan --profile default --json > plan.json
    specchat bench --profile default --prompts open repetitive --methods ngram,none --gamma auto --out B
    python docs/benchmarks/plan_vs_bench.py plan.json B/results.json [--config "ngram γ=auto"]
"""

from __future__ import annotations

import argparse
import json
import statistics

from specchat.engine.gamma.cost_model import MeasuredCosts
from specchat.telemetry import expected_tokens_per_round


def decode_speedup(rows: list[dict], plain: list[dict]) -> float:
    """tokens/s of ``rows`` over ``plain``'s, each request's first step left out."""
    def rate(rs):
        return sum(r["new_tokens"] - 1 for r in rs) / sum(r["wall_ms"] - r["steps"][0]["total_ms"] for r in rs)
    return rate(rows) / rate(plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("bench")
    parser.add_argument("--config", default="ngram γ=auto")
    args = parser.parse_args()
    plan = json.load(open(args.plan))
    bench = json.load(open(args.bench))
    print("| set | α | m | context | plan's γ | predicted | drafts a step | predicted there | measured, decoding "
          "| off (best γ / there) | as run | off (as run) | measured, end to end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, figures in bench["aggregates"]["sets"].items():
        mine = [r for r in bench["rows"] if r["config"] == args.config and (name == "all" or r["set"] == name)]
        plain = [r for r in bench["rows"] if r["config"] == "none" and (name == "all" or r["set"] == name)]
        if not mine or args.config not in figures:
            continue
        alpha = figures[args.config]["alpha"]
        steps = [s for r in mine for s in r["steps"][1:]]
        m = sum(1 for s in steps if s["num_draft_tokens"]) / len(steps)
        context = statistics.mean(r["prompt_tokens"] + r["new_tokens"] / 2 for r in mine)
        nearest = min(plan["contexts"], key=lambda c: abs(int(c) - context))
        costs = plan["contexts"][nearest]
        c, v = costs["c"], costs["v"]

        def predicted(g):
            e = expected_tokens_per_round(alpha, g)
            return (m * e + 1 - m) / (m * (g * c + v[g]) + 1 - m)

        gamma = max(range(1, len(v)), key=predicted)
        drafted = [s["num_draft_tokens"] for s in steps if s["num_draft_tokens"]]
        mean_k = sum(drafted) / len(drafted)
        low = min(int(mean_k), len(v) - 2)
        there = predicted(low) + (mean_k - low) * (predicted(low + 1) - predicted(low)) if low else predicted(1)
        measured = decode_speedup(mine, plain)
        priced = MeasuredCosts.from_report(plan).as_run([(s.get("context_tokens", 0), s["num_draft_tokens"],
                                                          s["num_accepted_tokens"]) for s in steps])
        print(f"| {name} | {alpha:.2f} | {m:.2f} | {context:.0f} → {nearest} | {gamma} | {predicted(gamma):.2f}× "
              f"| {mean_k:.1f} | {there:.2f}× | {measured:.2f}× | {predicted(gamma) / measured - 1:+.0%} / "
              f"{there / measured - 1:+.0%} | {priced:.2f}× | {priced / measured - 1:+.0%} "
              f"| {figures[args.config]['speedup']:.2f}× |")


if __name__ == "__main__":
    main()
