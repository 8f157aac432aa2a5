"""A benchmark's results: ``results.json`` (raw rows, aggregates, environment), ``report.md``
(the tables a reader needs, with the definitions) and the terminal's Rich tables."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat.bench.configs import written
from specchat.bench.stats import ALL_SETS

METHOD_NOTE = """\
- Order: request-major — for every prompt and repeat, each configuration runs once, in an order
  rotated by one per request, so drift of the machine falls on all configurations alike.
- Every run starts from an empty KV cache; no state is reused across configurations.
- Sampling: the profile's settings ({sampling}); each request has its own seed (base seed {seed} +
  1009 · prompt number + repeat), the same for every configuration, including the peer row.
- `none` is plain decoding through the same engine (no proposer), on the same target.
- tokens/s = Σ emitted tokens / Σ request wall time (from the generate call to the last token,
  prefill included). Speed-up = tokens/s ÷ tokens/s of `none` on the same requests; its 95 % CI is
  a paired percentile bootstrap over requests (2,000 resamples).
- TTFT: prefill + first step. Inter-token latency: a step emitting m tokens Δt after the previous one
  counts m tokens of Δt/m; p50/p95 over all tokens after the first.
- Acceptance metrics follow vLLM: mean acceptance length = 1 + accepted / drafting steps, draft
  acceptance rate = accepted / drafted, histogram = drafting steps by number of drafts kept.
  α = mean Σ min(p, q) over verified positions; c = draft forward time / target token time;
  v(γ) = target time to verify γ drafts / target token time (measured on the engine's calibration
  steps). Predictions come from one cost model (engine/gamma/cost_model.py): as run, Σ E(k) / Σ T(k)/w(0) over
  each step's forecast, with each request's prompt step added to both sides as measured (speed-up's clock
  includes it); the γ it recommends at the end, with its predicted speed-up; and, for reference,
  the paper's E(γ)/(γc + 1), which ignores the cost of verification.
- Peer rows (`peer:…`), the engine a user would pick instead on the same weights, same prompt ids,
  max_new_tokens, stop ids, sampling and seeds. transformers targets: `generate` plain (`peer:none`), with
  `assistant_model` (constant γ assistant tokens, confidence stopping off; γ = auto runs transformers' own
  dynamic defaults) or `prompt_lookup_num_tokens = γ`. llama.cpp targets: llama-cpp-python's `generate`
  plain (`peer:none (…)`, and `peer:none (FILE, …)` for other GGUF files) and with `LlamaPromptLookupDecoding`
  (`num_pred_tokens = γ`; auto = max_speculative_tokens), same thread count and flash attention (on, as our backend runs it);
  llama-server on the same GGUF, plain (`peer:none (llama-server, …)`) and with each n-gram `--spec-type` its
  `--help` lists (`peer:ngram-… (llama-server, …)`: lookup n = prompt_lookup_max and drafts up to
  max_speculative_tokens where the type has those knobs; ngram-mod at llama.cpp's `--spec-default` settings).
- Kernels, in a llama.cpp peer row's name and each row's `kernels`: llama-server runs llama.cpp's stock kernels
  (started with SPECCHAT_GGML_UPSTREAM=1); llama-cpp-python runs in bench's process, on the same kernels as ours
  (specchat's, patches/llama.cpp, unless SPECCHAT_GGML_UPSTREAM was set: stock).
- Overhead: median step time outside the proposer and the target's forward (sampling, verification,
  bookkeeping), and its share of a plain step.
- Concurrency {concurrency}: {concurrency_note}
- Memory: draft parameters and the draft's KV cache at the end of a request (largest over requests);
  peak GPU memory on CUDA (per request, largest shown); on CPU the resident set after each request and
  the process's lifetime peak RSS ({peak_rss})."""


def recommended_text(f: dict) -> str:
    """The cost model's recommended γ and its predicted speed-up: "3 (1.21×)", "auto (1.10×)"."""
    gamma, gain = f.get("best_gamma"), f.get("recommended_gain")
    if gamma is None:
        return "–"
    return f"{gamma}" + (f" ({gain:.2f}×)" if gain is not None else "")


def concurrency_note(concurrency: int) -> str:
    if concurrency <= 1:
        return "requests run one at a time (no queueing)."
    return (f"the engine decodes one sequence at a time, so batched speculation is not measured: requests "
            f"arrive {concurrency} at a time and are served as a FIFO queue; 'latency' includes the wait "
            f"(sum of the measured service times ahead of a request), throughput is unchanged by queueing.")


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _mib(value: Any) -> str:
    return "–" if not value else f"{value / 2**20:.1f} MiB"


def ratio_text(compared: dict[str, Any] | None, digits: int = 3) -> str:
    """A paired ratio (stats.pooled_ratio's) with its interval: "1.052× [1.010, 1.090]"."""
    if not compared:
        return "–"
    ci = compared.get("ci")
    return f"{compared['ratio']:.{digits}f}×" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def speedup_text(figures: dict[str, Any]) -> str:
    """The speed-up over plain decoding with its interval, as ratio_text writes a ratio."""
    speedup = figures.get("speedup")
    return ratio_text(None if speedup is None else {"ratio": speedup, "ci": figures.get("speedup_ci")}, 2)


def vs_peer_text(name: str, ratios: dict[str, Any]) -> str:
    return f"{name}: " + ", ".join(f"{ratio_text(r)} vs {peer}" for peer, r in ratios.items())


def attention_width(env: dict[str, Any]) -> str:
    """", attention W-wide" where the small-batch attention kernel ran (older results: nothing)."""
    width = env.get("llama_cpp_attention_width")
    if width is None:
        return ""
    return f", attention {width}-wide" if width else ", attention llama.cpp's own"


def stopped_early_note(stopped: dict[str, int]) -> str:
    return (f"**Stopped early: {stopped['requests_done']} of {stopped['requests']} requests ran under every "
            "configuration; the figures cover those alone.**")


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    settings = results["settings"]
    peak_rss = _mib(results.get("peak_rss_bytes"))
    lines = [
        f"# specchat bench — profile `{env['profile']}`", "",
        f"{results['created']} · device {env['device']} ({env.get('device_name', '')}) · target "
        f"`{env.get('target_source')}` · draft `{env.get('draft_source')}` · torch {env['torch']} · "
        f"transformers {env['transformers']} · specchat {env['specchat']}"
        + (f" · llama-cpp-python {env['llama_cpp_python']}" if env.get("llama_cpp_python") else "")
        + (f" (small-batch kernels: {env['llama_cpp_kernel']}{attention_width(env)})" if env.get("llama_cpp_kernel") else "")
        + (f" · target {env['target_format']}" if env.get("target_format") else ""), "",
        *([f"Precision: {env['precision']}.", ""] if env.get("precision") else []),
        *([f"**Busy machine: other processes used {results['cpu_others']:.0%} of the CPU during this run — "
           "timings unreliable.**", ""] if results.get("busy_machine") else []),
        *([stopped_early_note(results["stopped_early"]), ""] if results.get("stopped_early") else []),
        "## Method", "",
        METHOD_NOTE.format(sampling=settings["sampling"], seed=settings["base_seed"],
                           concurrency=settings["concurrency"],
                           concurrency_note=concurrency_note(settings["concurrency"]), peak_rss=peak_rss),
        "", "![measured speed-up vs γ](speedup_vs_gamma.png)", "",
    ]
    for set_name, configs in results["aggregates"]["sets"].items():
        title = "all sets (mixed total)" if set_name == ALL_SETS else f"set `{set_name}`"
        info = results["prompt_sets"].get(set_name, {})
        lines += [f"## {title}", ""]
        if info:
            lines += [f"{info['description']} — {info['prompts']} prompts, max_new_tokens {info['max_new_tokens']}.", ""]
        lines += [
            "| config | tok/s | speed-up [95% CI] | TTFT ms | ITL p50 / p95 ms | latency mean / p95 ms "
            "| mean acc. len | accept rate | α | c | v(γ) | predicted (as run) | recommended γ (predicted) | paper, ignores verify cost "
            "| overhead ms/step (share of a plain step) | draft mem (params + KV) | peak mem |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, f in configs.items():
            gamma = round(f["gamma"]) if f.get("gamma") else None
            v = f.get("verify_cost", {}).get(str(gamma)) if gamma else None
            peak = f.get("peak_gpu_bytes_max") or f.get("rss_bytes_max")
            lines.append(
                f"| {name} | {_fmt(f['tokens_per_s'], '.1f')} | {speedup_text(f)} | {_fmt(f['ttft_ms'], '.0f')} "
                f"| {_fmt(f['itl_ms_p50'], '.1f')} / {_fmt(f['itl_ms_p95'], '.1f')} "
                f"| {_fmt(f['latency_ms_mean'], '.0f')} / {_fmt(f['latency_ms_p95'], '.0f')} "
                f"| {_fmt(f.get('mean_acceptance_length') or None)} | {_fmt(f.get('draft_acceptance_rate'), '.0%')} "
                f"| {_fmt(f.get('alpha'))} | {_fmt(f.get('cost_ratio'), '.3f')} | {_fmt(v)} "
                f"| {_fmt(f.get('predicted_end_to_end'), '.2f', '×')} "
                f"| {recommended_text(f)} | {_fmt(f.get('predicted_speedup_paper'), '.2f', '×')} "
                f"| {_fmt(f.get('overhead_ms'), '.2f')} ({_fmt(f.get('overhead_share'), '.1%')}) "
                f"| {_mib(f['draft_param_bytes'])} + {_mib(f['draft_kv_bytes_max'])} | {_mib(peak)} |")
        for method, c in results["aggregates"].get("auto_vs_best", {}).get(set_name, {}).items():
            lines += ["", f"{c['auto']} vs the best fixed γ on these requests ({c['best_fixed']}, chosen in "
                          f"hindsight): {ratio_text(c)}."]
        peers = results["aggregates"].get("vs_peers", {}).get(set_name, {})
        if peers:
            lines += ["", "tokens/s against the plain peer rows (paired, 95% CI):", ""]
            lines += [f"- {vs_peer_text(n, r)}" for n, r in peers.items() if not n.startswith("peer:none")]
        paired = [f"{n} {f['same_tokens_as_none']}/{f['paired_requests']}" for n, f in configs.items()
                  if n != "none" and f.get("paired_requests")]
        if paired:
            lines += ["", "Replies identical to `none`'s (same seed): " + ", ".join(paired) + "."]
        histograms = [(n, f["acceptance_histogram"]) for n, f in configs.items() if f.get("num_drafts")]
        if histograms:
            lines += ["", "Acceptance histograms (drafting steps that kept 0, 1, 2, … drafts):", ""]
            lines += [f"- {n}: {list(h)}" for n, h in histograms]
        lines.append("")
    return "\n".join(lines)


def write_files(out_dir: Path, results: dict, report_md: str, plot: str,
                draw: Callable[[Any, dict], Any]) -> dict[str, Path]:
    """results.json, report.md and the ``plot`` image (``draw(pyplot, results)``'s figure)
    in ``out_dir`` → their paths; never lost (configs.written)."""
    return written(out_dir, lambda folder: _write_files(folder, results, report_md, plot, draw))


def _write_files(out_dir: Path, results: dict, report_md: str, plot: str,
                 draw: Callable[[Any, dict], Any]) -> dict[str, Path]:
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md", "plot": out_dir / plot}
    paths["json"].write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(report_md, encoding="utf-8")
    matplotlib.use("Agg")  # no display needed; safe in threads and over SSH
    import matplotlib.pyplot as plt

    fig = draw(plt, results)
    fig.savefig(paths["plot"], dpi=110)
    plt.close(fig)
    return paths


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
                _fmt(f.get("overhead_ms"), ".2f")
                + (f" ({f['overhead_share']:.0%})" if f.get("overhead_share") else ""),
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
