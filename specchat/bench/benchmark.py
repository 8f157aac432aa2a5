"""One benchmark from start to files: configurations → runs → aggregates → outputs."""

from __future__ import annotations

import datetime as _dt
import platform
from pathlib import Path
from typing import Any

from specchat.bench.configs import BenchConfig
from specchat.bench.prompt_sets import PromptSet
from specchat.bench.report import markdown, write_files
from specchat.bench.stats import aggregate


def benchmark(loaded: Any, profile: Any, sets: list[PromptSet], configs: list[BenchConfig], *, repeat: int = 1,
              max_new_tokens: int | None = None, concurrency: int = 1, progress=None, warmup: bool = True) -> dict:
    """Runs everything and returns the results document written to results.json."""
    from specchat.bench.runner import TURN_2, run_benchmark, second_turn_sets

    raw = run_benchmark(loaded, profile, sets, configs, repeat=repeat, max_new_tokens=max_new_tokens,
                        progress=progress, warmup=warmup)
    names = [c.name for c in configs]
    described = describe(loaded, profile, sets, configs, repeat=repeat, max_new_tokens=max_new_tokens,
                         concurrency=concurrency, warmup=warmup)
    for s in sets:  # a multi-turn set's second turns: reported on their own (runner.py)
        follow_ups = sum(len(p.turns) > 1 for p in s.prompts)
        if follow_ups:
            described["prompt_sets"][s.name + TURN_2] = {
                "description": f"the second turn of {s.name}'s questions, after the model's own first reply",
                "prompts": follow_ups, "source": s.source, "max_new_tokens": max_new_tokens or s.max_new_tokens}
    return {
        **described,
        "requests": raw["requests"],
        "rows": [r.to_dict() for r in raw["rows"]],
        # None, or {"requests_done", "requests"}: stopped by the user, the rest not run
        "stopped_early": raw["stopped_early"],
        "peak_rss_bytes": raw["peak_rss_bytes"],
        # other processes' share of the cores during our rows (contention.py): above
        # BUSY_SHARE the timings, and every ratio below, are not to be trusted
        "cpu_others": raw["cpu_others"],
        "busy_machine": raw["busy_machine"],
        "aggregates": aggregate(raw["rows"], [s.name for s in sets] + second_turn_sets(sets), names, concurrency),
    }


def benchmark_concurrency(loaded: Any, profile: Any, sets: list[PromptSet], configs: list[BenchConfig],
                          levels: list[int], *, repeat: int = 1, max_new_tokens: int | None = None, progress=None,
                          warmup: bool = True) -> dict:
    """``--concurrency`` with levels: N chats at once (concurrency.py)."""
    from specchat.bench.concurrency import config_name, run_concurrency
    from specchat.bench.concurrency_report import aggregate_concurrency
    from specchat.bench.memory import peak_rss_bytes

    raw = run_concurrency(loaded, profile, sets, configs, levels, repeat=repeat, max_new_tokens=max_new_tokens,
                          progress=progress, warmup=warmup)
    described = describe(loaded, profile, sets, configs, repeat=repeat, max_new_tokens=max_new_tokens,
                         concurrency=levels, warmup=warmup)
    for config, entry in zip(configs, described["configs"]):
        entry["name"] = config_name(config)
    return {**described, "mode": "concurrency", "runs": raw["runs"], "rows": [r.to_dict() for r in raw["rows"]],
            "peak_rss_bytes": peak_rss_bytes(), "cpu_others": raw["cpu_others"], "busy_machine": raw["busy_machine"],
            "aggregates": aggregate_concurrency(raw["runs"], raw["rows"], [s.name for s in sets])}


def describe(loaded: Any, profile: Any, sets: list[PromptSet], configs: list[BenchConfig], *, repeat: int,
             max_new_tokens: int | None, concurrency: int | list[int], warmup: bool) -> dict:
    """What ran where: the environment, the settings, the prompt sets and configurations."""
    import torch
    import transformers

    from specchat import __version__

    info = loaded.info or {}
    target = info.get("target") or {}
    sampling, speculation = profile.sampling, profile.speculation
    return {
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "environment": {
            "profile": profile.name, "specchat": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "device": info.get("device", str(loaded.target.device)),
            "device_name": info.get("device_name", ""),
            "cpu_threads": target.get("n_threads") or torch.get_num_threads(), "target_source": profile.target.source,
            "draft_source": speculation.draft and speculation.draft.source,
            "models": {"target": info.get("target"), "draft": info.get("draft")},
            "backend": info.get("backend", "transformers"), "target_format": target.get("dtype"),
            "llama_cpp_python": target.get("llama_cpp_python"), "llama_cpp_kernel": target.get("llama_cpp_kernel"),
            "llama_cpp_attention_width": target.get("llama_cpp_attention_width"),
            "precision": info.get("precision"),
        },
        "settings": {
            "sampling": f"temperature {sampling.temperature}, top_p {sampling.top_p}, top_k {sampling.top_k}",
            "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
            "base_seed": sampling.seed if sampling.seed is not None else 0, "repeat": repeat,
            "max_new_tokens": max_new_tokens, "concurrency": concurrency, "warmup": warmup,
            "speculation": {"prompt_lookup_min": speculation.prompt_lookup_min,
                            "prompt_lookup_max": speculation.prompt_lookup_max,
                            "max_speculative_tokens": speculation.max_speculative_tokens},
        },
        "prompt_sets": {s.name: {"description": s.description, "prompts": len(s.prompts), "source": s.source,
                                 "max_new_tokens": max_new_tokens or s.max_new_tokens} for s in sets},
        "configs": [c.to_dict() for c in configs],
    }


def write_outputs(out_dir: Path, results: dict) -> dict[str, Path]:
    return write_files(out_dir, results, markdown(results), "speedup_vs_gamma.png", draw)


COLOURS = {"draft_model": "tab:blue", "ngram": "tab:orange"}


def draw(plt: Any, results: dict[str, Any]) -> Any:
    """``speedup_vs_gamma.png``: measured speed-up vs γ per prompt set (points with 95 % CI),
    the predicted curve from the pooled measured α, c, v (solid) and the paper's E(γ)/(γc + 1)
    (dotted); γ = auto at its mean γ (star), peer rows hollow."""
    sets = results["aggregates"]["sets"]
    curves = results["aggregates"]["curves"]
    configs = {c["name"]: c for c in results["configs"]}
    names = list(sets)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False, sharey=True)
    for ax, set_name in zip(axes[0], names):
        for method, colour in COLOURS.items():
            curve = curves.get(set_name, {}).get(method)
            if curve:
                known = [(g, v) for g, v in zip(curve["gammas"], curve["predicted"]) if v is not None]
                ax.plot([g for g, _ in known], [v for _, v in known], "-", color=colour, alpha=0.7,
                        label=f"{method} predicted (α={curve['alpha']:.2f}, c={curve['cost_ratio']:.2f})")
                ax.plot(curve["gammas"], curve["paper"], ":", color=colour, alpha=0.5)
            for name, figures in sets[set_name].items():
                config = configs.get(name)
                if not config or config["method"] != method or figures.get("speedup") is None:
                    continue
                auto = config["gamma"] == "auto"
                x = figures.get("gamma") if auto else config["gamma"]
                if auto and not x:
                    continue
                ci = figures.get("speedup_ci")
                yerr = [[figures["speedup"] - ci[0]], [ci[1] - figures["speedup"]]] if ci else None
                peer = config["runner"] == "peer"
                ax.errorbar([x], [figures["speedup"]], yerr=yerr, fmt="*" if auto else "o", color=colour,
                            markerfacecolor="none" if peer else colour, markersize=9 if auto else 6, capsize=3)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_title("all sets" if set_name == "all" else set_name)
        ax.set_xlabel("γ (drafts per step)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("speed-up over plain decoding (×)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        h, lab = ax.get_legend_handles_labels()
        handles += [x for x, y in zip(h, lab) if y not in labels]
        labels += [y for y in lab if y not in labels]
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("measured (points: ours filled, transformers hollow, ★ auto) vs predicted (— cost-aware, ⋯ paper)",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.12 if handles else 0, 1, 0.95))
    return fig
