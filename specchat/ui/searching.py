"""Ctrl+F: search this chat and the recorded sessions, pure Python. A hit carries what it goes to
(a transcript widget, or a recording's path) and a one-line snippet, cleaned and shown as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from specchat.events import TurnFinished, UserMessage
from specchat.sanitize import clean_line


@dataclass(frozen=True)
class Searchable:
    target: Any  # what a hit goes to: a transcript widget, or a recording's Path
    where: str  # "you · this chat", "reply 3 · this chat", "2026-12-06 chat.jsonl"
    text: str


@dataclass(frozen=True)
class Hit:
    target: Any
    where: str
    snippet: str


def snippet(text: str, start: int, length: int, width: int = 70) -> str:
    """One clean line of about ``width`` characters around text[start:start + length]."""
    context = max(0, (width - length) // 2)
    lo, hi = max(0, start - context), min(len(text), start + length + context)
    line = clean_line(text[lo:hi])  # newlines and controls made inert, on one line
    return ("…" if lo else "") + line + ("…" if hi < len(text) else "")


def search(query: str, items: Iterable[Searchable], limit: int = 50) -> list[Hit]:
    """Every item holding ``query`` (case-insensitive), in the order given, at most
    ``limit``; nothing for a blank query."""
    needle = query.strip().casefold()
    if not needle:
        return []
    hits = []
    for item in items:
        at = item.text.casefold().find(needle)
        if at >= 0:
            hits.append(Hit(item.target, item.where, snippet(item.text, at, len(needle))))
            if len(hits) >= limit:
                break
    return hits


def sessions_texts() -> list[Searchable]:
    """What the recordings in the sessions dir said, newest first: each message and reply,
    pointing at its file. One that cannot be read is left out (Ctrl+R's list says why)."""
    from specchat.sessions.history import list_sessions
    from specchat.sessions.reader import read_recording

    items = []
    for summary in list_sessions():
        try:
            recording = read_recording(summary.path)
        except Exception:  # damaged, removed meanwhile: not searched
            continue
        where = clean_line(f"{summary.date} {summary.path.name}")
        for timed in recording.events:
            event = timed.event
            if isinstance(event, (UserMessage, TurnFinished)) and event.text:
                items.append(Searchable(summary.path, where, event.text))
    return items
