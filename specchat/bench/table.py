"""The terminal summary: one Rich table per prompt set (the full figures are in report.md)."""

from __future__ import annotations

from typing import Any

from specchat.bench.report import _fmt, ratio_text, speedup_text, vs_peer_text
from specchat.bench.stats import ALL_SETS


def render_tables(console: Any, results: dict[str, Any]) -> None:
    from rich.table import Table

    for set_name, configs in results["aggregates"]["sets"].items():
        title = "all sets (mixed total)" if set_name == ALL_SETS else f"set: {set_name}"
        table = Table(title=title, title_justify="left")
        for header in ("config", "tok/s", "speed-up [95% CI]", "TTFT ms", "ITL p50/p95 ms", "mean acc. len",
                       "accept", "α", "c", "predicted (as run)", "overhead ms"):
            table.add_column(header, justify="left" if header == "config" else "right")
        for name, f in configs.items():
            speedup = speedup_text(f)
            if f.get("speedup") is not None and name != "none":
                speedup = f"[{'green' if f['speedup'] > 1 else 'red'}]{speedup}[/]"
            table.add_row(
                name, _fmt(f["tokens_per_s"], ".1f"), speedup, _fmt(f["ttft_ms"], ".0f"),
                f"{_fmt(f['itl_ms_p50'], '.1f')}/{_fmt(f['itl_ms_p95'], '.1f')}",
                _fmt(f.get("mean_acceptance_length") or None), _fmt(f.get("draft_acceptance_rate"), ".0%"),
                _fmt(f.get("alpha")), _fmt(f.get("cost_ratio"), ".3f"),
                _fmt(f.get("predicted_end_to_end"), ".2f", "×"),
                _fmt(f.get("overhead_ms"), ".2f") + (f" ({f['overhead_share']:.0%})" if f.get("overhead_share") else ""),
            )
        console.print(table)
        for c in results["aggregates"].get("auto_vs_best", {}).get(set_name, {}).values():
            console.print(f"  {c['auto']} vs the best fixed γ here ({c['best_fixed']}): {ratio_text(c)}")
        for name, ratios in results["aggregates"].get("vs_peers", {}).get(set_name, {}).items():
            if not name.startswith("peer:none"):
                console.print(f"  {vs_peer_text(name, ratios)}")


def render_rows(console: Any, title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A plain table of already formatted cells (bench --concurrency)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, header in enumerate(columns):
        table.add_column(header, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
