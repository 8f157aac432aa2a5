"""``speedup_vs_gamma.png``: measured speed-up vs γ per prompt set (points with 95 % CI),
the predicted curve E(γ)/(γc + v(γ)) from the pooled measured α, c, v (solid) and the
paper's E(γ)/(γc + 1) (dotted); γ = auto at its mean γ (star), peer rows hollow."""

from __future__ import annotations

from typing import Any

COLOURS = {"draft_model": "tab:blue", "ngram": "tab:orange"}


def draw(plt: Any, results: dict[str, Any]) -> Any:
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
