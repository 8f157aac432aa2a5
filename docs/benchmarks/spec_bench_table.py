"""Issue 43's Spec-Bench table and its bars, read from one `specchat bench` results.json.

Per set (each Spec-Bench category, MT-bench's second turn, and all of them pooled): the
default's speed-up over llama.cpp plain (llama-cpp-python, the `peer:none` row) and over
our own plain decoding, each with bench's paired bootstrap CI; bench's "predicted (as
run)" and how far it is from the measured speed-up; and the fastest llama-server n-gram
row with the default's paired ratio to it. Then the issue's bars, each PASS or FAIL:

* overall ≥ 1.25× llama.cpp plain; no category below 1.05×;
* above llama-server's best n-gram type in every category (the paired ratio > 1);
* predicted (as run) within 10 % of measured in every category.

    specchat bench --profile default --prompts spec-bench:10 --max-new-tokens 256 --repeat 3 --out B
    python docs/benchmarks/spec_bench_table.py B/results.json [--config "ngram γ=auto"]
"""

from __future__ import annotations

import argparse
import gzip
import json

from specchat.bench.configs import PLAIN_PEERS
from specchat.bench.report import stopped_early_note

SERVER = " (llama-server"  # in every llama-server row's name: "(llama-server, stock kernels)", earlier "(llama-server)"


def ratio_text(ratio: dict | None) -> str:
    if not ratio:
        return "–"
    ci = ratio.get("ci")
    return f"{ratio['ratio']:.2f}× [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{ratio['ratio']:.2f}×"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--config", default="ngram γ=auto", help="the default's row (default: %(default)s)")
    args = parser.parse_args()
    opener = gzip.open if args.results.endswith(".gz") else open  # the archive keeps them gzipped
    with opener(args.results, "rt", encoding="utf-8") as f:
        results = json.load(f)
    aggregates = results["aggregates"]
    ours = args.config
    print(f"{results['created']} · {results['environment'].get('profile')} · "
          f"T = {results['settings'].get('temperature')} · busy machine: {results.get('busy_machine')} "
          f"(others' share of the cores {results.get('cpu_others') or 0:.1%})\n")
    stopped = results.get("stopped_early")
    if stopped:
        print(stopped_early_note(stopped) + " No bar can pass.\n")
    print("| set | × llama.cpp plain [95% CI] | × our plain [95% CI] | predicted (as run) | off | "
          "mean acc. len | fastest llama-server n-gram row | × it [95% CI] |")
    print("|---|---|---|---|---|---|---|---|")
    failures = []
    for name, figures in aggregates["sets"].items():
        mine = figures.get(ours)
        if mine is None:
            continue
        peers = aggregates["vs_peers"].get(name, {}).get(ours, {})
        plain = next((peers[p] for p in PLAIN_PEERS if p in peers), None)  # llama-cpp-python's, whatever kernels
        servers = {c: f for c, f in figures.items() if SERVER in c and not c.startswith("peer:none")}
        fastest = max(servers, key=lambda c: servers[c]["tokens_per_s"] or 0.0) if servers else None
        versus = peers.get(fastest) if fastest else None
        measured, predicted = mine.get("speedup"), mine.get("predicted_end_to_end")
        off = predicted / measured - 1 if measured and predicted else None
        ours_plain = {"ratio": measured, "ci": mine.get("speedup_ci")} if measured else None
        label = "**all**" if name == "all" else name.removeprefix("spec-bench/")
        print(f"| {label} | {ratio_text(plain)} | {ratio_text(ours_plain)} | "
              f"{predicted:.2f}× | {off:+.0%} | {mine.get('mean_acceptance_length') or 0:.2f} | "
              f"{(fastest or '–').removeprefix('peer:').split(SERVER)[0]} | {ratio_text(versus)} |"
              if predicted and off is not None else
              f"| {label} | {ratio_text(plain)} | {ratio_text(ours_plain)} | – | – | – | – | {ratio_text(versus)} |")
        if name == "all":
            if not plain or plain["ratio"] < 1.25:
                failures.append(f"overall {ratio_text(plain)} over llama.cpp plain, under 1.25×")
            continue
        if not plain or plain["ratio"] < 1.05:
            failures.append(f"{label}: {ratio_text(plain)} over llama.cpp plain, under 1.05×")
        if fastest and (not versus or versus["ratio"] <= 1.0):
            failures.append(f"{label}: {ratio_text(versus)} of llama-server's {fastest}")
        if off is None or abs(off) > 0.10:
            failures.append(f"{label}: predicted (as run) off by {off:+.0%}" if off is not None
                            else f"{label}: no prediction")
    print()
    if stopped:
        failures.append(f"the run stopped early ({stopped['requests_done']} of {stopped['requests']} requests)")
    print("bars: PASS" if not failures else "bars: FAIL\n- " + "\n- ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
