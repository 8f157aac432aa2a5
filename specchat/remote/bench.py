"""``specchat bench`` on a remote profile: the server with speculation against the same
model served without it, side by side.

llama-server 0.3.36 has no per-request switch for speculation (its per-request
``speculative.*`` fields are compiled out), and vLLM fixes speculation at start-up, so
plain decoding needs a second server: ``--plain-url``. Without one, bench measures the
speculative server alone and says that it cannot compare. Speeds are the server's own
generation time (tokens / Σ step ms); the prompt's prefill is left out of both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specchat.events import StepEvent, TurnFinished


def _measure(chat, prompt: str) -> dict[str, Any]:
    tokens, gen_ms, finished = 0, 0.0, None
    chat.reset()
    for event in chat.send(prompt):
        if isinstance(event, StepEvent):
            tokens += len(event.step.tokens)
            gen_ms += event.step.stats.verify_ms
        elif isinstance(event, TurnFinished):
            finished = event
    turn = (finished.metrics or {}).get("turn", {}) if finished else {}
    return {"tokens": tokens, "generation_ms": gen_ms,
            "tokens_per_s": tokens / (gen_ms / 1000) if gen_ms > 0 else None,
            "finish_reason": finished.finish_reason if finished else "error",
            **{k: turn.get(k) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                         "mean_acceptance_length", "draft_acceptance_rate")}}


def remote_bench(profile, sets, *, plain_url: str | None, repeat: int = 1, max_new_tokens: int | None = None,
                 say=print) -> dict[str, Any]:
    """Runs every prompt on the speculative server (the profile's url) and, with
    ``plain_url``, on the plain one; returns the results document."""
    from specchat.remote.connect import open_chat

    configs = {"speculative": profile}
    if plain_url:
        configs["plain"] = profile.replace(target={"url": plain_url})
    else:
        say("bench: no --plain-url (a second server of the same model without speculation): "
            "measuring the speculative server alone; no speed-up can be computed")
    rows = []
    for name, prof in configs.items():
        chat, info = open_chat(prof)
        if name == "plain" and info.get("server_num_speculative_tokens"):
            say(f"bench: warning: the --plain-url server speculates ({info.get('server_speculative')})")
        for s in sets:
            limit = max_new_tokens or s.max_new_tokens
            chat.max_new_tokens = limit
            for prompt in s.prompts:
                for r in range(repeat):
                    rows.append({"config": name, "set": s.name, "prompt": prompt.id, "repeat": r,
                                 **_measure(chat, prompt.text)})
    summary = {}
    for name in configs:
        mine = [r for r in rows if r["config"] == name]
        tokens = sum(r["tokens"] for r in mine)
        ms = sum(r["generation_ms"] for r in mine)
        summary[name] = {"tokens": tokens, "tokens_per_s": tokens / (ms / 1000) if ms else None,
                         "num_drafts": sum(r["num_drafts"] or 0 for r in mine),
                         "num_accepted_tokens": sum(r["num_accepted_tokens"] or 0 for r in mine)}
    spec, plain = summary.get("speculative", {}), summary.get("plain", {})
    speedup = (spec["tokens_per_s"] / plain["tokens_per_s"]
               if spec.get("tokens_per_s") and plain.get("tokens_per_s") else None)
    from specchat.redact import redact_url

    return {"profile": profile.name, "url": redact_url(profile.target.url),
            "plain_url": plain_url and redact_url(plain_url), "rows": rows,
            "summary": summary, "measured_speedup": speedup}


def table(results: dict[str, Any]) -> str:
    lines = [f"{'config':<12} {'tokens':>7} {'tok/s':>8} {'drafts':>7} {'accepted':>9}"]
    for name, s in results["summary"].items():
        tps = "–" if s["tokens_per_s"] is None else f"{s['tokens_per_s']:.1f}"
        lines.append(f"{name:<12} {s['tokens']:>7} {tps:>8} {s['num_drafts']:>7} {s['num_accepted_tokens']:>9}")
    speedup = results["measured_speedup"]
    lines.append("measured speed-up (speculative / plain): " + ("– (no plain server)" if speedup is None
                                                              else f"{speedup:.2f}×"))
    return "\n".join(lines)


def write(out_dir: Path, results: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    return path

