"""Crafted recordings, as an attacker would share them, and the check that output is inert.

``evil(tag)`` is a visible marker ``<tag:>`` around every kind of terminal attack: a
window title (OSC 0), a clipboard write (OSC 52), clear-screen, a DCS string, their
8-bit C1 forms, bell and bidi overrides. Sanitised, it must read exactly ``<tag:>``:
the marker proves the text was kept (nothing lost), the rest must be gone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PAYLOADS = (
    "\x1b]0;PWNED-title\x07",  # window title
    "\x1b]52;c;UFdORUQ=\x07",  # OSC 52: write "PWNED" to the clipboard
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1bP1$qPWNED-dcs\x1b\\",  # a DCS string
    "\x9b2J",  # C1 CSI
    "\x9d0;PWNED-c1\x9c",  # C1 OSC … C1 ST
    "\x07\x08\r",  # bell, backspace, a bare carriage return
    "\u202e\u2066\u200f",  # right-to-left override, isolate, mark
)
ATTACK = "".join(PAYLOADS)
# What must never reach a terminal: escape/control bytes (but \n, \t and CR LF), C1,
# the disguising format characters, and the payloads' own text.
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]|\r(?!\n)")
_OUR_SGR = re.compile(r"\x1b\[[0-9;]*m")


def evil(tag: str) -> str:
    return f"<{tag}:{ATTACK}>"


def shown(tag: str) -> str:
    """What :func:`evil` must look like once sanitised."""
    return f"<{tag}:>"


def assert_inert(text: str, *, colours: bool = False, escaped: bool = False, where: str = "output") -> None:
    """No attack survives in ``text`` (``colours``: our own SGR colour codes allowed;
    ``escaped``: JSON that keeps the exact data, as ``\\u001b`` escapes)."""
    if colours:
        text = _OUR_SGR.sub("", text)
    bad = _FORBIDDEN.search(text)
    assert bad is None, f"{where}: {bad.group()!r} at {bad.start()}: {text[max(0, bad.start() - 60):bad.start() + 20]!r}"
    for word in () if escaped else ("PWNED", "UFdORUQ"):
        assert word not in text, f"{where}: the payload {word!r} got through"


def _line(data: dict, ts: float) -> str:
    return json.dumps({**data, "ts": ts}, ensure_ascii=False)


def _step(turn: int, tag: str, kinds=("accepted", "resampled", "bonus", "target")) -> dict:
    tokens = [{"id": 100 + i, "kind": kind, "p": 0.5, "q": 0.6 if kind == "accepted" else None,
               "alternatives": [{"id": 7, "p": 0.2, "text": evil(f"{tag}-alt{i}")}],
               "rejected_id": None, "rejected_p": None, "rejected_q": None, "text": evil(f"{tag}-{kind}")}
              for i, kind in enumerate(kinds)]
    stats = {"num_speculative_tokens": 3, "num_draft_tokens": 3, "num_accepted_tokens": 2, "alpha_sum": 2.1,
             "alpha_count": 3, "draft_forwards": 3, "draft_ms": 3.0, "verify_ms": 12.0, "total_ms": 16.0,
             "prefill_ms": 0.0, "prefill_tokens": 0, "reused_tokens": 0, "predicted_gain": None}
    return {"type": "StepEvent", "turn": turn, "step": {"tokens": tokens, "stats": stats, "finish_reason": evil("stepfinish")},
            "t": 0.02}


def header(**changes) -> dict:
    profile = {
        "name": evil("profile"), "description": evil("description"), "source_path": evil("source_path"),
        "target": {"source": evil("target")},
        "speculation": {"method": "draft_model", "num_speculative_tokens": 3, "max_speculative_tokens": 8,
                        "draft": {"source": evil("draft")}},
        "sampling": {"temperature": 0.5}, evil("unknown-profile-key"): evil("unknown-profile-value"),
    }
    return {"type": "SessionHeader", "specchat_version": evil("version"), "profile": profile,
            "models": {"target": {"source": evil("model")}, evil("models-key"): evil("models-value")},
            "environment": {"torch": evil("torch"), evil("env-key"): evil("env-value")},
            "created": evil("created"), "format": 1, **changes}


def crafted_events() -> list[dict]:
    """Every event kind, an attack in each of its text fields (unknown keys aside)."""
    turn_metrics = {"num_steps": 1, "num_tokens": 4, "num_drafts": 1, "tokens_per_s": 90.0,
                    "mean_acceptance_length": 3.0, evil("metrics-key"): evil("metrics-value")}
    return [
        {"type": "UserMessage", "turn": 1, "text": evil("user") + "\nsecond line"},
        {"type": "TurnStarted", "turn": 1, "prompt_tokens": 12, "num_speculative_tokens": 3},
        _step(1, "tok"),
        {"type": "TurnFinished", "turn": 1, "finish_reason": evil("finish"), "text": evil("reply"),
         "metrics": {"turn": turn_metrics, "session": turn_metrics, evil("m-key"): evil("m-value")}, "t": 0.03},
        {"type": "ProfileSwitched", "name": evil("switched")},
        {"type": "ErrorEvent", "message": evil("error"), "turn": None},
        {"type": "ChatReset"},
        {"type": "UserMessage", "turn": 2, "text": evil("user2")},
        {"type": "TurnStarted", "turn": 2, "prompt_tokens": 12, "num_speculative_tokens": "auto", "note": evil("note")},
        _step(2, "tok2", ("target",)),
        {"type": "TurnFinished", "turn": 2, "finish_reason": "eos", "text": evil("reply2"), "metrics": {}, "t": 0.05},
    ]


def write_crafted(path: Path, events: list[dict] | None = None, head: dict | None = None,
                  extra_lines: list[str] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [_line(head or header(), 1000.0)]
    lines += [_line(event, 1000.0 + 0.01 * (i + 1)) for i, event in enumerate(events if events is not None else
                                                                             crafted_events())]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")
    return path


# Tags whose text a transcript shows (headless replay, cast, Markdown, TUI).
TRANSCRIPT_TAGS = ("user", "tok-accepted", "tok-resampled", "tok-bonus", "tok-target", "user2", "note", "tok2-target")
