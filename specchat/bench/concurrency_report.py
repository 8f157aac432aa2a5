"""A concurrency benchmark's outputs: results.json, report.md, the table printed and
``speedup_vs_concurrency.png`` (speed-up over plain decoding against N: throughput and
one client's decoding speed, with 95 % intervals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specchat.bench.report import _fmt, ratio_text, write_files

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
                out.append(f"N={n}: {config} at {ratio_text(f['vs_server_plain'], 2)} llama-server -np {n}'s plain throughput")
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
        for sentence in [*agg["crossover"].get(name, {}).values(), *comparison_lines(levels)]:
            lines.append(f"- {sentence}")
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
