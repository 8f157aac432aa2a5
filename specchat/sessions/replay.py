"""Replaying a recording: the recorded events again, at their recorded pace or faster.

Torch-free (json, :mod:`specchat.events`, :mod:`specchat.telemetry` only): this is what
lets someone without a GPU watch a session. The UI adapter lives in
:mod:`specchat.sessions.replay_backend`; exports use :func:`timed_events` directly.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterator

from specchat.events import ChatReset, ErrorEvent, ProfileSwitched, StepEvent, TurnStarted, UserMessage
from specchat.sessions.reader import Damage, Recording, RecordingError, read_recording
from specchat.telemetry import MetricsSnapshot, Telemetry

__all__ = [
    "Damage",
    "Recording",
    "RecordingError",
    "damage_event",
    "parse_speed",
    "read_recording",
    "rebuild_metrics",
    "replay_events",
    "timed_events",
]

SPEEDS = ("1", "2", "max")
# Gaps before a user's action (reading, thinking, typing) are clamped to this many
# seconds, as asciinema's idle_time_limit does; model timings are never clamped, so a
# replay shows the real decode speed.
IDLE_LIMIT_S = 1.5
_USER_ACTIONS = (UserMessage, ProfileSwitched, ChatReset)


def parse_speed(text: str | float) -> float:
    """"1" / "2" / "max" (or any positive number) → a factor; "max" is infinity."""
    if isinstance(text, (int, float)):
        value = float(text)
    elif str(text).strip().lower() in ("max", "inf", "fast"):
        return math.inf
    else:
        try:
            value = float(str(text).rstrip("x"))
        except ValueError:
            raise ValueError(f"--speed {text!r}: expected 1, 2 or max") from None
    if not value > 0:
        raise ValueError(f"--speed {text!r}: must be positive (1, 2 or max)")
    return value


def damage_event(damage: Damage) -> ErrorEvent:
    """The ErrorEvent a replay ends with when the file was damaged or cut short."""
    return ErrorEvent(message=f"replay stopped: {damage}")


def timed_events(recording: Recording, idle_limit: float = IDLE_LIMIT_S) -> Iterator[tuple[float, Any]]:
    """(seconds since the replay started, event) at recorded pace, user idle clamped.

    A damaged recording ends with :func:`damage_event`, right after the last good event.
    """
    clock = 0.0
    previous = recording.header_ts
    for timed in recording.events:
        if timed.ts is not None and previous is not None:
            gap = max(0.0, timed.ts - previous)
            if isinstance(timed.event, _USER_ACTIONS):
                gap = min(gap, idle_limit)
            clock += gap
        if timed.ts is not None:
            previous = timed.ts
        yield clock, timed.event
    if recording.damage is not None:
        yield clock, damage_event(recording.damage)


def replay_events(
    source: Recording | str | os.PathLike[str], speed: float | str = 1.0, idle_limit: float = IDLE_LIMIT_S
) -> Iterator[tuple[float, Any]]:
    """(delay in seconds before this event, event) scaled by ``speed`` (inf: no delays)."""
    recording = source if isinstance(source, Recording) else read_recording(source)
    factor = parse_speed(speed)
    last = 0.0
    for at, event in timed_events(recording, idle_limit):
        delay = 0.0 if math.isinf(factor) else (at - last) / factor
        last = at
        yield delay, event


def rebuild_metrics(recording: Recording, max_gamma: int | None = None) -> MetricsSnapshot:
    """The session's speculation figures, recomputed from the recorded StepStats exactly
    as the live engine computes them (one Telemetry fed every step; a new turn starts the
    time-to-first-token clock). ``max_gamma`` defaults to the profile's
    ``max_speculative_tokens`` (8 if absent)."""
    if max_gamma is None:
        spec = recording.header.profile.get("speculation") or {}
        max_gamma = int(spec.get("max_speculative_tokens") or 8) if isinstance(spec, dict) else 8
    telemetry = Telemetry(max_gamma=max_gamma)
    for timed in recording.events:
        ev = timed.event
        if isinstance(ev, TurnStarted):
            telemetry.start_turn()
        elif isinstance(ev, StepEvent):
            telemetry.update(ev.step.stats, len(ev.step.tokens))
    return telemetry.snapshot()
