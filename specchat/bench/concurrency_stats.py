"""Figures of a concurrency benchmark, per level N and configuration
(``by_set[set]["N"][config]``). Every definition: docs/design/bench.md"""

from __future__ import annotations

from typing import Any

from specchat.bench.report import ratio_text
from specchat.bench.row import BenchRow
from specchat.bench.stats import per_token_latencies, percentile, pooled_ratio
from specchat.events import DraftCounts

ALL = "all"


# runner → the plain configuration its speculating rows are compared with
PLAIN = {"specchat": "none", "single": "none (one sequence)", "peer": "peer:none (llama-server)"}


def _decode_span(row: BenchRow) -> tuple[float, float]:
    """(tokens after the first, ms from the first emission to the last) of one request."""
    e = row.emissions
    return (row.new_tokens - e[0][1], e[-1][0] - e[0][0]) if len(e) > 1 else (0.0, 0.0)


def by_run(runs: list[dict], all_runs: list[dict], config: str) -> dict[str, Any] | None:
    """``runs``' throughput over ``config``'s on the same runs (pooled_ratio)."""
    theirs = {(r["set"], r["repeat"]): r for r in all_runs if r["config"] == config}
    return pooled_ratio([(r["tokens"], r["wall_ms"], b["tokens"], b["wall_ms"]) for r in runs
                         if (b := theirs.get((r["set"], r["repeat"])))], "pairs")


def figures(runs: list[dict], rows: list[BenchRow], all_runs: list[dict], all_rows: list[BenchRow]) -> dict[str, Any]:
    """One configuration at one N (``all_*``: every configuration's, same N and sets)."""
    config, runner = runs[0]["config"], runs[0]["runner"]
    wall = sum(r["wall_ms"] for r in runs)
    spans = [_decode_span(r) for r in rows]
    decode_ms = sum(s[1] for s in spans)
    itl = [x for r in rows for x in per_token_latencies(r.emissions)]
    steps = [s for r in rows for s in r.steps]
    drafts = DraftCounts()
    for s in steps:
        drafts.add(s)
    # llama-server's rows carry its counters, not steps
    drafts.num_draft_tokens += sum(r.server_drafted or 0 for r in rows if not r.steps)
    drafts.num_accepted_tokens += sum(r.server_accepted or 0 for r in rows if not r.steps)
    marginal = [s.marginal_ms for s in steps if s.marginal_ms is not None]
    out: dict[str, Any] = {
        "runs": len(runs), "requests": len(rows), "tokens": sum(r["tokens"] for r in runs),
        "throughput_tokens_per_s": sum(r["tokens"] for r in runs) / wall * 1000.0 if wall else None,
        "request_tokens_per_s": sum(s[0] for s in spans) / decode_ms * 1000.0 if decode_ms else None,
        "ttft_ms_p50": percentile([r.emissions[0][0] for r in rows if r.emissions], 50),
        "itl_ms_p50": percentile(itl, 50), "itl_ms_p95": percentile(itl, 95),
        "draft_acceptance_rate": drafts.draft_acceptance_rate, "drafted": drafts.num_draft_tokens,
        "mean_acceptance_length": drafts.mean_acceptance_length,
        "marginal_ms_p50": percentile(marginal, 50),
        "batch_size_mean": sum(s.batch_size for s in steps) / len(steps) if steps else None,
    }
    plain = PLAIN[runner]
    if config != plain:
        out["throughput_vs_plain"] = by_run(runs, all_runs, plain)
        theirs = {(r.set, r.repeat, r.index): r for r in all_rows if r.config == plain}
        out["request_speed_vs_plain"] = pooled_ratio([(*_decode_span(r), *_decode_span(b)) for r in rows
                                                      if (b := theirs.get((r.set, r.repeat, r.index)))], "pairs")
    if runner == "specchat":
        out["vs_server_plain"] = by_run(runs, all_runs, PLAIN["peer"])
        out["vs_one_sequence"] = by_run(runs, all_runs, f"{config} (one sequence)")  # N = 1: same method
    return out


def level_figures(runs: list[dict], rows: list[BenchRow]) -> dict[str, dict]:
    """{config: figures} for the runs of one N (and one set, or all)."""
    out = {}
    for config in dict.fromkeys(r["config"] for r in runs):
        mine = [r for r in runs if r["config"] == config]
        ids = {r["run"] for r in mine}
        out[config] = figures(mine, [r for r in rows if r.run in ids], runs, rows)
    return out


def crossover(levels: dict[str, dict], config: str, set_name: str) -> str | None:
    """The one sentence on where ``config`` stops paying, from {N: {config: figures}}."""
    seen = [(int(n), f[config]["throughput_vs_plain"]) for n, f in levels.items()
            if config in f and f[config].get("throughput_vs_plain")]
    if not seen:
        return None
    seen.sort()
    where = "all sets" if set_name == ALL else f"'{set_name}'"

    def said(n: int, r: dict) -> str:
        return f"{ratio_text(r, 2)} at N={n}"

    if all(r["ratio"] >= 1.0 for _, r in seen):
        return f"{config} pays at every N tested on {where}: " + ", ".join(said(n, r) for n, r in seen)
    if all(r["ratio"] < 1.0 for _, r in seen):
        return f"{config} does not pay at any N tested on {where}: " + ", ".join(said(n, r) for n, r in seen)
    first = next(i for i, (_, r) in enumerate(seen) if r["ratio"] < 1.0)
    if first == 0:
        return (f"{config} does not pay at N={seen[0][0]} on {where} but does at larger N: "
                + ", ".join(said(n, r) for n, r in seen))
    n, r = seen[first]
    return (f"{config} stops paying at N={n} on {where}: {said(n, r)} of plain throughput, "
            f"after {said(*seen[first - 1])}")


def aggregate_concurrency(runs: list[dict], rows: list[BenchRow], set_names: list[str]) -> dict:
    levels = sorted({r["concurrency"] for r in runs})
    by_set: dict[str, dict] = {}
    for name in [*set_names, ALL]:
        sruns = [r for r in runs if name == ALL or r["set"] == name]
        srows = [r for r in rows if name == ALL or r.set == name]
        by_set[name] = {str(n): level_figures([r for r in sruns if r["concurrency"] == n],
                                              [r for r in srows if r.concurrency == n])
                        for n in levels if any(r["concurrency"] == n for r in sruns)}
    speculating = [c for c in dict.fromkeys(r["config"] for r in runs) if c not in PLAIN.values()]
    return {
        "levels": levels,
        "by_concurrency": by_set[ALL],
        "by_set": by_set,
        "crossover": {name: {c: s for c in speculating if (s := crossover(levels_of, c, name))}
                      for name, levels_of in by_set.items()},
    }
