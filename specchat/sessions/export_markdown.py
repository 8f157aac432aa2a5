"""A recording as Markdown: the transcript, then the session's speculation metrics recomputed
from its steps (so a crashed session has them too). Recorded text is sanitised, then kept from
being read as Markdown or HTML: short fields escaped or in code spans, the user's messages
escaped inside quotes, each reply verbatim in a fence longer than any backtick run in it.
"""

from __future__ import annotations

import re
from typing import Any

from specchat import sanitize
from specchat.events import (FINISH_NOTES, ChatReset, ErrorEvent, ProfileSwitched, TurnFinished, TurnStarted,
                             UserMessage)
from specchat.sessions.ansi import figure
from specchat.sessions.reader import Recording
from specchat.sessions.replay import rebuild_metrics
from specchat.telemetry import MetricsSnapshot


def metrics_rows(m: MetricsSnapshot) -> list[tuple[str, str]]:
    """(label, value) rows: the panel's figures, named as in the telemetry docstring."""
    return [
        ("steps", str(m.num_steps)),
        ("tokens", str(m.num_tokens)),
        ("drafting steps", str(m.num_drafts)),
        ("draft tokens proposed / accepted", f"{m.num_draft_tokens} / {m.num_accepted_tokens}"),
        ("mean acceptance length (tokens per verification)", figure(m.mean_acceptance_length)),
        ("draft acceptance rate", figure(m.draft_acceptance_rate and m.draft_acceptance_rate * 100, ".1f", " %")),
        ("α (alpha, measured)", figure(m.alpha, ".3f")),
        ("c (cost ratio, draft forward / target forward)", figure(m.cost_ratio, ".3f")),
        ("mean γ (num_speculative_tokens)", figure(m.gamma, ".2f")),
        ("verdict (cost model)", m.verdict or "too early to say"),
        ("predicted speedup, as run (cost model)", figure(m.predicted_speedup, ".2f", "×")),
        ("measured speedup", figure(m.measured_speedup, ".2f", "×")),
        ("recommended γ (cost model)", "–" if m.best_gamma is None else str(m.best_gamma)),
        ("recommended γ's predicted speedup", figure(m.recommended_gain, ".2f", "×")),
        ("paper's break-even α > c (ignores verification cost)", figure(m.breakeven)),
        ("paper's predicted speedup, E / (γc + 1) (ignores verification cost)",
         figure(m.predicted_speedup_paper, ".2f", "×")),
        ("tokens/s", figure(m.tokens_per_s, ".1f")),
        ("plain target tokens/s", figure(m.plain_tokens_per_s, ".1f")),
        ("time to first token (last turn)", figure(m.ttft_ms, ".0f", " ms")),
    ]


# Characters Markdown (or the HTML it allows) gives a meaning anywhere in a line.
_INLINE = re.compile(r"([\\`*_\[\]<>&|~])")
# What makes a line start a heading, quote, list, rule or setext underline.
_LINE_START = re.compile(r"^(\s*\d*)([#>+=-]|(?<=\d)[.)])")


def _text(value: Any) -> str:
    """An untrusted field as literal inline text."""
    return _INLINE.sub(r"\\\1", sanitize.clean_line(value))


def _code(value: Any) -> str:
    """An untrusted field as a code span (nothing inside one is interpreted)."""
    text = sanitize.clean_line(value)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _quote(text: str) -> str:
    """The user's message, escaped line by line inside a block quote."""
    lines = []
    for line in sanitize.clean(text).splitlines() or [""]:
        line = _LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), _INLINE.sub(r"\\\1", line))
        lines.append("> " + line if line else ">")
    return "\n".join(lines)


def _fenced(text: str) -> str:
    """A reply, verbatim: a fenced block closes only on a longer backtick run than any inside."""
    text = sanitize.clean(text)
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence}text\n{text}\n{fence}"


def _source(model: Any) -> Any:
    return model.get("source", model) if isinstance(model, dict) else model


def to_markdown(recording: Recording) -> str:
    header = recording.header
    target = header.models.get("target") or header.profile.get("target") or {}
    spec = header.profile.get("speculation") if isinstance(header.profile.get("speculation"), dict) else {}
    draft = header.models.get("draft") or spec.get("draft") or {}
    lines = [
        f"# specchat session · {_text(header.created or recording.path.name)}",
        "",
        f"- profile: {_code(recording.profile_name)}",
        f"- target: {_code(_source(target))}",
    ]
    from specchat.remote import is_server_session, server_fields

    if is_server_session(header.models):  # the server's own speculation, not the profile's table
        server = server_fields(header.models)
        lines.append(f"- server: {_code(header.models.get('backend'))} at {_code(header.models.get('url'))}")
        lines.append(f"- speculation: {_text(server['method'])}, γ = {_text(server['num_speculative_tokens'] or '?')} "
                     f"({_text(server['details']['speculation_source'])})")
    elif spec.get("method"):
        lines.append(f"- speculation: {_text(spec.get('method'))}, γ = {_text(spec.get('num_speculative_tokens', '?'))}")
    if draft:
        lines.append(f"- draft: {_code(_source(draft))}")
    lines += [f"- specchat {_text(header.specchat_version)}", "", "## Transcript", ""]
    for timed in recording.events:
        ev = timed.event
        if isinstance(ev, UserMessage):
            lines += [f"**You** (turn {ev.turn}):", "", _quote(ev.text), ""]
        elif isinstance(ev, TurnStarted) and ev.note:  # shown above the reply in the TUI too
            lines += [f"_{_text(ev.note)}_", ""]
        elif isinstance(ev, TurnFinished):
            reason = FINISH_NOTES.get(ev.finish_reason, ev.finish_reason)
            note = "" if ev.finish_reason in ("eos", "stop") else f" _({_text(reason)})_"
            lines += [f"**Assistant**{note}:", "", _fenced(ev.text) if ev.text else "_(nothing generated)_", ""]
        elif isinstance(ev, ProfileSwitched):
            lines += [f"_— switched to profile {_code(ev.name)} —_", ""]
        elif isinstance(ev, ChatReset):
            lines += ["_— new chat —_", ""]
        elif isinstance(ev, ErrorEvent):
            lines += [f"**Error:** {_text(ev.message)}", ""]
    if recording.damage is not None:
        lines += [f"> **Recording damaged:** {_text(recording.damage)}", ""]
    m = rebuild_metrics(recording)
    lines += ["## Speculation metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in metrics_rows(m)]
    if m.num_drafts:
        lines += ["", "Acceptance histogram (drafting steps that kept n drafts):", "", "| n | steps |", "|---|---|"]
        lines += [f"| {n} | {count} |" for n, count in enumerate(m.acceptance_histogram)]
    return "\n".join(lines).rstrip() + "\n"

