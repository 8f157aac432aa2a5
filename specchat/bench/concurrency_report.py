"""A concurrency benchmark's figures, per level N and configuration (``by_set[set]["N"][config]``;
every definition: docs/design/bench.md), and its outputs: results.json, report.md, the table
printed and ``speedup_vs_concurrency.png`` (speed-up over plain against N, with 95 % intervals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specchat.bench.configs import SERVER
from specchat.bench.report import _fmt, ratio_text, write_files
from specchat.bench.row import BenchRow
from specchat.bench.stats import per_token_latencies, percentile, pooled_ratio
from specchat.events import DraftCounts

ALL = "all"


# runner → the plain configuration its speculating rows are compared with
PLAIN = {"specchat": "none", "single": "none (one sequence)", "peer": f"peer:none{SERVER}"}


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
    seen = sorted((int(n), f[config]["throughput_vs_plain"]) for n, f in levels.items()
                  if config in f and f[config].get("throughput_vs_plain"))
    if not seen:
        return None
    where = "all sets" if set_name == ALL else f"'{set_name}'"

    def said(n: int, r: dict) -> str:
        return f"{ratio_text(r, 2)} at N={n}"

    every = ", ".join(said(n, r) for n, r in seen)
    if all(r["ratio"] >= 1.0 for _, r in seen):
        return f"{config} pays at every N tested on {where}: {every}"
    if all(r["ratio"] < 1.0 for _, r in seen):
        return f"{config} does not pay at any N tested on {where}: {every}"
    first = next(i for i, (_, r) in enumerate(seen) if r["ratio"] < 1.0)
    if first == 0:
        return f"{config} does not pay at N={seen[0][0]} on {where} but does at larger N: {every}"
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


COLUMNS = ("N", "config", "tok/s (all)", "× plain", "tok/s (one)", "× plain", "TTFT p50", "ITL p50", "ITL p95",
           "accepted", "+ms a draft")


def table_rows(levels: dict[str, dict]) -> list[tuple[str, ...]]:
    return [(n, config, _fmt(f["throughput_tokens_per_s"], ".1f"), ratio_text(f.get("throughput_vs_plain"), 2),
             _fmt(f["request_tokens_per_s"], ".1f"), ratio_text(f.get("request_speed_vs_plain"), 2),
             _fmt(f["ttft_ms_p50"], ".0f", " ms"), _fmt(f["itl_ms_p50"], ".1f"), _fmt(f["itl_ms_p95"], ".1f"),
             _fmt(f["draft_acceptance_rate"], ".0%"), _fmt(f["marginal_ms_p50"], ".2f"))
            for n, configs in levels.items() for config, f in configs.items()]


def comparison_lines(levels: dict[str, dict]) -> list[str]:
    """Ours against llama-server's plain rows, and a batch of one against one sequence."""
    out = []
    for n, configs in levels.items():
        for config, f in configs.items():
            if f.get("vs_server_plain"):
                out.append(f"N={n}: {config} at {ratio_text(f['vs_server_plain'], 2)} llama-server -np {n}'s plain "
                           "throughput (stock kernels)")
            if f.get("vs_one_sequence"):
                out.append(f"N={n}: batched {config} at {ratio_text(f['vs_one_sequence'], 2)} the one-sequence engine's throughput")
    return out


def markdown(results: dict[str, Any]) -> str:
    agg = results["aggregates"]
    env, settings = results["environment"], results["settings"]
    lines = [f"# specchat bench --concurrency {','.join(map(str, agg['levels']))}", "",
             f"- Profile {env['profile']}, {env['platform']}, {env['cpu_threads']} threads, "
             f"sampling {settings['sampling']}, {settings['repeat']} repeats, max_new_tokens {settings['max_new_tokens']}",
             "- N closed-loop clients; a run serves max(prompts, 2N) requests; ours decode together in one llama.cpp "
             "context, llama-server runs with -np N. Ratios are paired with plain decoding of the same runner at the "
             "same N (by run for throughput, by request for one client's speed), 95 % bootstrap intervals.", ""]
    if results.get("busy_machine"):
        lines += [f"**Busy machine: other processes used {results['cpu_others']:.0%} of the CPU during these runs; "
                  "the timings and every ratio below are unreliable.**", ""]
    for name, levels in agg["by_set"].items():
        lines += [f"## {'all sets' if name == 'all' else name}", ""]
        lines += [f"- {line}" for line in [*agg["crossover"].get(name, {}).values(), *comparison_lines(levels)]]
        lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(row) + " |" for row in table_rows(levels)]
        lines.append("")
    return "\n".join(lines)


def draw(plt: Any, results: dict[str, Any]) -> Any:
    by_set = results["aggregates"]["by_set"]
    fig, axes = plt.subplots(2, len(by_set), figsize=(4.2 * len(by_set), 6.4), squeeze=False, sharex=True)
    for col, (name, levels) in enumerate(by_set.items()):
        for row, key in enumerate(("throughput_vs_plain", "request_speed_vs_plain")):
            ax = axes[row][col]
            configs = dict.fromkeys(c for f in levels.values() for c, v in f.items() if v.get(key))
            for config in configs:
                pts = [(int(n), f[config][key]) for n, f in levels.items() if config in f and f[config].get(key)]
                ax.errorbar([n for n, _ in pts], [r["ratio"] for _, r in pts],
                            yerr=[[r["ratio"] - (r["ci"] or [r["ratio"]] * 2)[0] for _, r in pts],
                                  [(r["ci"] or [r["ratio"]] * 2)[1] - r["ratio"] for _, r in pts]],
                            fmt="o-" if not config.startswith("peer:") else "s--", capsize=3, label=config)
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{'all sets' if name == 'all' else name}: "
                         f"{'throughput' if row == 0 else 'one client'}", fontsize=9)
            ax.grid(alpha=0.3)
        axes[1][col].set_xlabel("N (chats at once)")
    axes[0][0].set_ylabel("× plain throughput")
    axes[1][0].set_ylabel("× plain decoding speed")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 if handles else 0, 1, 1))
    return fig


def write_outputs(out_dir: Path, results: dict) -> dict[str, Path]:
    return write_files(out_dir, results, markdown(results), "speedup_vs_concurrency.png", draw)
