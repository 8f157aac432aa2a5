"""A recording's events as raw-terminal text (CR LF) with ANSI colours by provenance, for the
.cast export, ``specchat replay --headless`` and the headless demo. Recorded text is cleaned
first: the only escape sequences out are the colours added here.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from specchat import sanitize
from specchat.events import (FINISH_NOTES, ChatReset, ErrorEvent, ProfileSwitched, StepEvent, TurnFinished, TurnStarted,
                             UserMessage)
from specchat.sessions.reader import Recording

RESET = "\x1b[0m"
# Fixed ANSI colours (the cast plays in any terminal theme): the same roles as the TUI's
# theme variables — accepted drafts green, resampled (draft rejected) yellow, bonus cyan,
# plain target tokens the terminal's default colour.
PROVENANCE_SGR = {"accepted": "\x1b[32m", "resampled": "\x1b[33m", "bonus": "\x1b[36m", "target": ""}
USER_SGR = "\x1b[1;35m"
DIM_SGR = "\x1b[2m"
ERROR_SGR = "\x1b[1;31m"


def clean(text: str) -> str:
    """Recorded or generated text, inert (see :mod:`specchat.sanitize`), with raw-terminal newlines."""
    return sanitize.clean(text).replace("\n", "\r\n")


def figure(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    """A recorded figure as text: yes / no for a flag, "–" for what is not a finite number."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = isinstance(value, (int, float))
    return f"{value:{spec}}{suffix}" if number and math.isfinite(value) else "–"


def _turn_summary(ev: TurnFinished) -> str:
    turn = ev.metrics.get("turn") if isinstance(ev.metrics, dict) else None
    parts = [f"turn {ev.turn}: {sanitize.clean_line(FINISH_NOTES.get(ev.finish_reason, ev.finish_reason))}"]
    if isinstance(turn, dict):
        parts.append(f"{figure(turn.get('num_tokens', 0), 'd')} tokens")
        parts.append(figure(turn.get("tokens_per_s"), ".1f", " tok/s"))
        if turn.get("num_drafts"):
            parts.append("mean acceptance length " + figure(turn.get("mean_acceptance_length"), ".2f"))
    return " · ".join(parts)


def render(event: Any) -> str:
    """The terminal output for one event ("" for events that print nothing)."""
    if isinstance(event, UserMessage):
        return f"{USER_SGR}you ›{RESET} {clean(event.text)}\r\n\r\n"
    if isinstance(event, TurnStarted):  # a note the TUI shows above the reply (e.g. turns out of the window)
        return f"{DIM_SGR}[{sanitize.clean_line(event.note)}]{RESET}\r\n" if event.note else ""
    if isinstance(event, StepEvent):
        out = []
        for token in event.step.tokens:
            sgr = PROVENANCE_SGR.get(token.kind, "")
            text = clean(token.text)
            out.append(f"{sgr}{text}{RESET}" if sgr and text else text)
        return "".join(out)
    if isinstance(event, TurnFinished):
        return f"\r\n{DIM_SGR}[{_turn_summary(event)}]{RESET}\r\n\r\n"
    if isinstance(event, ProfileSwitched):
        return f"{DIM_SGR}── profile: {sanitize.clean_line(event.name)} ──{RESET}\r\n\r\n"
    if isinstance(event, ChatReset):
        return f"{DIM_SGR}── new chat ──{RESET}\r\n\r\n"
    if isinstance(event, ErrorEvent):
        return f"\r\n{ERROR_SGR}{clean(event.message)}{RESET}\r\n"
    return ""


def banner(recording: Recording) -> str:
    header = recording.header
    target = header.models.get("target") or header.profile.get("target", {})
    name = target.get("source") if isinstance(target, dict) else target
    legend = " ".join(f"{sgr}{kind}{RESET}" if sgr else kind for kind, sgr in PROVENANCE_SGR.items())
    about = sanitize.clean_line(header.specchat_version, "· profile", recording.profile_name, "·", name or "?")
    return f"\x1b[1mspecchat\x1b[0m {about}\r\n{DIM_SGR}tokens:{RESET} {legend}\r\n\r\n"


_SGR = re.compile(r"\x1b\[[0-9;]*m")


def write_stdout(text: str, colour: bool) -> None:
    """Rendered events on stdout with LF line ends, without their colour codes unless
    ``colour`` (for a pipe or a file)."""
    text = text.replace("\r\n", "\n")
    sys.stdout.write(text if colour else _SGR.sub("", text))
    sys.stdout.flush()
