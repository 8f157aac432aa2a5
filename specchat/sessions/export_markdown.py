"""A recording as Markdown: the transcript, then the session's speculation metrics.

The metrics are recomputed from the recorded per-step stats (see
:func:`specchat.sessions.replay.rebuild_metrics`), so they exist for a crashed session
too. Torch-free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specchat.events import ChatReset, ErrorEvent, ProfileSwitched, TurnFinished, UserMessage
from specchat.sessions.reader import Recording, read_recording
from specchat.sessions.replay import rebuild_metrics
from specchat.telemetry import MetricsSnapshot


def _num(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:{spec}}{suffix}"


def metrics_rows(m: MetricsSnapshot) -> list[tuple[str, str]]:
    """(label, value) rows: the panel's figures, named as in the telemetry docstring."""
    return [
        ("steps", str(m.num_steps)),
        ("tokens", str(m.num_tokens)),
        ("drafting steps", str(m.num_drafts)),
        ("draft tokens proposed / accepted", f"{m.num_draft_tokens} / {m.num_accepted_tokens}"),
        ("mean acceptance length (tokens per verification)", _num(m.mean_acceptance_length)),
        ("draft acceptance rate", _num(m.draft_acceptance_rate * 100, ".1f", " %")),
        ("α (alpha, measured)", _num(m.alpha, ".3f")),
        ("c (cost ratio, draft forward / target forward)", _num(m.cost_ratio, ".3f")),
        ("mean γ (num_speculative_tokens)", _num(m.gamma, ".2f")),
        ("break-even α > c", _num(m.breakeven)),
        ("predicted speedup (paper, E / (γc + 1))", _num(m.predicted_speedup_paper, ".2f", "×")),
        ("predicted speedup (measured verify cost)", _num(m.predicted_speedup, ".2f", "×")),
        ("measured speedup", _num(m.measured_speedup, ".2f", "×")),
        ("best γ", _num(m.best_gamma, "d")),
        ("tokens/s", _num(m.tokens_per_s, ".1f")),
        ("plain target tokens/s", _num(m.plain_tokens_per_s, ".1f")),
        ("time to first token (last turn)", _num(m.ttft_ms, ".0f", " ms")),
    ]


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines() or [""])


def to_markdown(recording: Recording) -> str:
    header = recording.header
    target = header.models.get("target") or header.profile.get("target") or {}
    draft = header.models.get("draft") or (header.profile.get("speculation") or {}).get("draft") or {}
    spec = header.profile.get("speculation") or {}
    lines = [
        f"# specchat session · {header.created or recording.path.name}",
        "",
        f"- profile: `{recording.profile_name}`",
        f"- target: `{target.get('source', target) if isinstance(target, dict) else target}`",
    ]
    if isinstance(spec, dict) and spec.get("method"):
        lines.append(f"- speculation: {spec.get('method')}, γ = {spec.get('num_speculative_tokens', '?')}")
    if draft:
        lines.append(f"- draft: `{draft.get('source', draft) if isinstance(draft, dict) else draft}`")
    lines += [f"- specchat {header.specchat_version}", "", "## Transcript", ""]
    for timed in recording.events:
        ev = timed.event
        if isinstance(ev, UserMessage):
            lines += [f"**You** (turn {ev.turn}):", "", _quote(ev.text), ""]
        elif isinstance(ev, TurnFinished):
            note = "" if ev.finish_reason in ("eos", "stop") else f" _({ev.finish_reason})_"
            lines += [f"**Assistant**{note}:", "", ev.text, ""]
        elif isinstance(ev, ProfileSwitched):
            lines += [f"_— switched to profile `{ev.name}` —_", ""]
        elif isinstance(ev, ChatReset):
            lines += ["_— new chat —_", ""]
        elif isinstance(ev, ErrorEvent):
            lines += [f"**Error:** {ev.message}", ""]
    if recording.damage is not None:
        lines += [f"> **Recording damaged:** {recording.damage}", ""]
    m = rebuild_metrics(recording)
    lines += ["## Speculation metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in metrics_rows(m)]
    if m.num_drafts:
        lines += ["", "Acceptance histogram (drafting steps that kept n drafts):", "", "| n | steps |", "|---|---|"]
        lines += [f"| {n} | {count} |" for n, count in enumerate(m.acceptance_histogram)]
    return "\n".join(lines).rstrip() + "\n"


def export_markdown(source: Recording | str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    recording = source if isinstance(source, Recording) else read_recording(source)
    out = Path(out)
    out.write_text(to_markdown(recording), encoding="utf-8")
    return out
