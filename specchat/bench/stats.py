"""Aggregates raw benchmark rows into the reported figures. Every definition: docs/design/bench.md"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import numpy as np

from specchat.bench.configs import SERVER
from specchat.bench.row import BenchRow
from specchat.engine.gamma.cost_model import CostModel
from specchat.telemetry import MetricsSnapshot, Telemetry, predicted_speedup

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
ALL_SETS = "all"
TELEMETRY_KEYS = (
    "num_steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "acceptance_histogram",
    "per_position_acceptance", "mean_acceptance_length", "draft_acceptance_rate", "alpha", "alpha_empirical",
    "target_token_ms", "draft_forward_ms", "cost_ratio", "verify_cost", "gamma", "expected_tokens_per_round",
    "predicted_speedup", "predicted_speedup_steps", "predicted_speedup_paper", "breakeven", "best_gamma",
    "recommended_gain", "verdict",
)


def per_token_latencies(emissions: list[list[float]]) -> list[float]:
    return [(t - t_prev) / m for (t_prev, _), (t, m) in zip(emissions, emissions[1:]) for _ in range(int(m))]


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def telemetry_of(rows: list[BenchRow]) -> MetricsSnapshot:
    telemetry = Telemetry(max_gamma=1)
    for row in rows:
        telemetry.start_turn()
        for stats in row.steps:
            telemetry.update(stats, 0)  # token counts are ours (below); the figures used here ignore them
    return telemetry.snapshot()


def predicted_end_to_end(rows: list[BenchRow]) -> float | None:
    """The cost model's forecasts as run, prompt included (docs/design/bench.md); None
    without a request that timed plain steps."""
    plain_ms = spec_ms = 0.0
    for row in rows:
        steps = row.steps
        plain = [s.total_ms for s in steps if not s.num_draft_tokens and not s.prefill_tokens]
        if len(steps) < 2 or not plain:
            continue
        w = float(np.median(plain))
        tokens = cost = 0.0
        for s in steps[1:]:
            forecast = s.predicted_tokens is not None and s.predicted_cost is not None
            tokens += s.predicted_tokens if forecast else 1 + s.num_accepted_tokens
            cost += s.predicted_cost if forecast else s.total_ms / w
        plain_ms += steps[0].total_ms + tokens * w
        spec_ms += steps[0].total_ms + steps[0].prefill_ms + cost * w
    return plain_ms / spec_ms if spec_ms else None


def bootstrap_speedup_ci(pairs: list[tuple[float, float, float, float]]) -> list[float] | None:
    """pairs: (tokens, wall_ms) of the configuration and of ``none`` per request → [lo, hi]."""
    if len(pairs) < 2:
        return None
    a = np.asarray(pairs, dtype=float)  # [n, 4]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, len(a), size=(BOOTSTRAP_RESAMPLES, len(a)))
    sums = a[idx].sum(axis=1)  # [B, 4]
    ratios = (sums[:, 0] / sums[:, 1]) / (sums[:, 2] / sums[:, 3])
    return [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]


def queue_latencies(walls: list[float], concurrency: int) -> list[float]:
    """Each request's wall time plus those ahead of it in its group of ``concurrency``."""
    n = max(1, concurrency)
    return [waited for start in range(0, len(walls), n) for waited in itertools.accumulate(walls[start:start + n])]


def matched_requests(rows: list[BenchRow], other: list[BenchRow]) -> list[tuple[BenchRow, BenchRow]]:
    """(row, other's row of the same request: set, prompt and repeat) for every row that has one."""
    theirs = {(r.set, r.prompt_id, r.repeat): r for r in other}
    return [(r, b) for r in rows if (b := theirs.get((r.set, r.prompt_id, r.repeat)))]


def timing_pairs(matched: list[tuple[BenchRow, BenchRow]]) -> list[tuple[float, float, float, float]]:
    """(tokens, wall_ms) of both rows of each matched request, as bootstrap_speedup_ci takes them."""
    return [(r.new_tokens, r.wall_ms, b.new_tokens, b.wall_ms) for r, b in matched]


def aggregate_rows(rows: list[BenchRow], baseline: list[BenchRow], concurrency: int) -> dict[str, Any]:
    tokens = sum(r.new_tokens for r in rows)
    wall_ms = sum(r.wall_ms for r in rows)
    tps = tokens / (wall_ms / 1000.0) if wall_ms > 0 else None
    matched = matched_requests(rows, baseline)
    pairs = timing_pairs(matched)
    same = sum(r.output_ids == b.output_ids for r, b in matched)
    base_tokens = sum(p[2] for p in pairs)
    base_wall = sum(p[3] for p in pairs)
    base_tps = base_tokens / (base_wall / 1000.0) if base_wall > 0 else None
    itl = [x for r in rows for x in per_token_latencies(r.emissions)]
    ttfts = [r.emissions[0][0] for r in rows if r.emissions]
    latencies = queue_latencies([r.wall_ms for r in sorted(rows, key=lambda r: r.order)], concurrency)
    result: dict[str, Any] = {
        "requests": len(rows), "tokens": tokens, "wall_ms": wall_ms, "tokens_per_s": tps,
        "speedup": (tps / base_tps) if (tps and base_tps and pairs) else None,
        "speedup_ci": bootstrap_speedup_ci(pairs),
        "paired_requests": len(pairs), "same_tokens_as_none": same,
        "ttft_ms": float(np.mean(ttfts)) if ttfts else None, "ttft_ms_p50": percentile(ttfts, 50),
        "itl_ms_p50": percentile(itl, 50), "itl_ms_p95": percentile(itl, 95),
        "latency_ms_mean": float(np.mean(latencies)) if latencies else None,
        "latency_ms_p95": percentile(latencies, 95),
        "draft_param_bytes": max((r.draft_param_bytes for r in rows), default=0),
        "draft_kv_bytes_max": max((r.draft_kv_bytes or 0 for r in rows), default=0),
        "peak_gpu_bytes_max": max((r.peak_gpu_bytes for r in rows if r.peak_gpu_bytes), default=None),
        "rss_bytes_max": max((r.rss_bytes for r in rows if r.rss_bytes), default=None),
    }
    if any(r.steps for r in rows):  # our engine: acceptance figures from the recorded steps
        snapshot = telemetry_of(rows).to_dict()
        result.update({key: snapshot[key] for key in TELEMETRY_KEYS})
        result["predicted_end_to_end"] = predicted_end_to_end(rows)
        overheads = [s.total_ms - s.verify_ms - s.draft_ms for r in rows for s in r.steps if not s.prefill_tokens]
        result["overhead_ms"] = percentile(overheads, 50)
        plain = snapshot["target_token_ms"]
        result["overhead_share"] = result["overhead_ms"] / plain if overheads and plain else None
    return result


def predicted_curve(rows: list[BenchRow], max_gamma: int) -> dict[str, Any] | None:
    """The cost model fed every step of a method's runs (all its γ pooled), and its
    predicted speed-up for a fixed γ = 1..max; the paper's E(γ)/(γc + 1) beside it."""
    snapshot = telemetry_of(rows)
    if snapshot.alpha is None or snapshot.cost_ratio is None:
        return None
    steps = [step for row in rows for step in row.steps]
    drafted = {name: s["drafted"] for name, s in snapshot.drafts_by_source.items() if name}
    if not drafted:
        return None
    source = max(drafted, key=drafted.get)
    # every verdict and step time of the runs weighs alike (not the live ~20 latest), and a
    # step that asked for drafts and got none (an n-gram miss) counts against the source
    model = CostModel(max_gamma, window=4096, decay=1e-9, by_context=False)
    for stats in steps:
        model.observe(stats, source, stats.draft_source or source)
    gains = model.gains(source, max_gamma)
    if gains is None:
        return None
    gammas = list(range(1, max_gamma + 1))
    alpha, c = snapshot.alpha, snapshot.cost_ratio
    return {
        "alpha": alpha, "cost_ratio": c, "verify_cost": {str(k): v for k, v in snapshot.verify_cost.items()},
        "gammas": gammas,
        "predicted": gains,
        "paper": [predicted_speedup(alpha, g, c) for g in gammas],
    }


def pooled_ratio(pairs: list[tuple[float, float, float, float]], counted: str = "requests") -> dict[str, Any] | None:
    """Σ tokens / Σ time of the first side of ``pairs`` (bootstrap_speedup_ci's) over the
    second's, with the paired bootstrap CI: {"ratio", "ci", counted: how many pairs};
    None without pairs, or where a time or the second side's tokens sum to 0."""
    sums = [sum(column) for column in zip(*pairs)]
    if not pairs or not all(sums[1:]):
        return None
    return {"ratio": (sums[0] / sums[1]) / (sums[2] / sums[3]), "ci": bootstrap_speedup_ci(pairs), counted: len(pairs)}


def paired_ratio(rows: list[BenchRow], other: list[BenchRow]) -> dict[str, Any] | None:
    """tokens/s of ``rows`` over that of ``other`` on the requests both ran (pooled_ratio)."""
    return pooled_ratio(timing_pairs(matched_requests(rows, other)))


def auto_vs_best_fixed(set_rows: list[BenchRow], figures: dict[str, dict]) -> dict[str, dict]:
    """Per method with a γ=auto configuration and fixed ones: the fixed γ that was fastest
    on these requests (chosen in hindsight) and auto's paired ratio to it."""
    out: dict[str, dict] = {}
    for method in ("draft_model", "ngram"):
        mine = [r for r in set_rows if r.runner == "specchat" and r.method == method]
        auto = [r for r in mine if r.gamma == "auto"]
        fixed = {r.config for r in mine if isinstance(r.gamma, int)}
        if not auto or not fixed:
            continue
        best = max(fixed, key=lambda name: figures[name]["tokens_per_s"] or 0.0)
        if (compared := paired_ratio(auto, [r for r in mine if r.config == best])) is not None:
            out[method] = {"auto": auto[0].config, "best_fixed": best, **compared}
    return out


def vs_plain_peers(set_rows: list[BenchRow]) -> dict[str, dict]:
    """{config: {peer: paired_ratio}} for every configuration (see ``vs_peers``)."""
    peers = sorted({r.config for r in set_rows if r.runner == "peer" and (r.method == "none" or r.config.endswith(SERVER))})
    out: dict[str, dict] = {}
    for config in dict.fromkeys(r.config for r in set_rows):
        mine = [r for r in set_rows if r.config == config]
        ratios = {p: ratio for p in peers if p != config
                  and (ratio := paired_ratio(mine, [r for r in set_rows if r.config == p])) is not None}
        if ratios:
            out[config] = ratios
    return out


def aggregate(rows: list[BenchRow], set_names: list[str], config_names: list[str], concurrency: int = 1) -> dict:
    """{"sets": {set: {config: figures}}, "curves": {set: {method: curve}},
    "auto_vs_best": {set: {method: ...}}, "vs_peers": {set: {config: {peer: ratio}}}};
    the set ``all`` pools every set (the mixed total)."""
    by_set: dict[str, list[BenchRow]] = defaultdict(list)
    for row in rows:
        by_set[row.set].append(row)
    by_set[ALL_SETS] = list(rows)
    out: dict[str, dict] = {"sets": {}, "curves": {}, "auto_vs_best": {}, "vs_peers": {}}
    for name in [*set_names, ALL_SETS]:
        set_rows = by_set.get(name, [])
        baseline = [r for r in set_rows if r.config == "none"]
        figures = out["sets"][name] = {config: aggregate_rows(cfg_rows, baseline, concurrency) for config in config_names
                                       if (cfg_rows := [r for r in set_rows if r.config == config])}
        out["auto_vs_best"][name] = auto_vs_best_fixed(set_rows, figures)
        out["vs_peers"][name] = vs_plain_peers(set_rows)
        curves = out["curves"][name] = {}
        for method in ("draft_model", "ngram"):
            fixed = [r for r in set_rows if r.runner == "specchat" and r.method == method and isinstance(r.gamma, int)]
            top = max((r.gamma for r in fixed), default=0)
            if fixed and (curve := predicted_curve(fixed, max(top, 8))):
                curves[method] = curve
    return out
