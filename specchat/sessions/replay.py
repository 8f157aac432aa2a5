"""Replaying a recording: the recorded events again, at their recorded pace or faster, and their
figures folded again. The UI adapter: :mod:`specchat.sessions.replay_backend`.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterator

from specchat.config.model import MAX_SPECULATIVE_TOKENS
from specchat.events import ChatReset, ErrorEvent, ProfileSwitched, UserMessage
from specchat.methods import METHODS
from specchat.sessions.reader import Recording, read_recording
from specchat.telemetry import ChatTelemetry, MetricsSnapshot

# Gaps before a user's action (reading, thinking, typing) are clamped to this many
# seconds, as asciinema's idle_time_limit does; model timings are never clamped, so a
# replay shows the real decode speed.
IDLE_LIMIT_S = 1.5
# No gap is replayed longer than this (a real step never takes a minute; a crafted
# recording must not make a replay sleep for years).
MAX_GAP_S = 60.0
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


def timed_events(recording: Recording) -> Iterator[tuple[float, Any]]:
    """(seconds since the replay started, event) at recorded pace, user idle clamped to IDLE_LIMIT_S;
    a damaged recording ends with an ErrorEvent naming the damage, right after the last good event."""
    clock = 0.0
    previous = recording.header_ts
    for timed in recording.events:
        if timed.ts is not None and previous is not None:
            gap = min(max(0.0, timed.ts - previous), MAX_GAP_S)
            if isinstance(timed.event, _USER_ACTIONS):
                gap = min(gap, IDLE_LIMIT_S)
            clock += gap
        if timed.ts is not None:
            previous = timed.ts
        yield clock, timed.event
    if recording.damage is not None:
        yield clock, ErrorEvent(f"replay stopped: {recording.damage}")


def replay_events(source: Recording | str | os.PathLike[str], speed: float | str = 1.0) -> Iterator[tuple[float, Any]]:
    """(delay in seconds before this event, event) scaled by ``speed`` (inf: no delays)."""
    recording = source if isinstance(source, Recording) else read_recording(source)
    factor = parse_speed(speed)
    last = 0.0
    for at, event in timed_events(recording):
        delay = 0.0 if math.isinf(factor) else (at - last) / factor
        last = at
        yield delay, event


def recorded_settings(profile: dict[str, Any]) -> dict[str, Any]:
    """The recorded profile's speculation settings, each checked (a header is untrusted like every
    line): ``method``, ``num_speculative_tokens`` (int or "auto"; 0 when the method is none),
    ``max_gamma`` (1..16, default 8), ``temperature`` (None if absent or not a finite number ≥ 0),
    ``prompt_lookup`` (min, max n-gram; 1, 3 if absent) and ``max_new_tokens`` (None if absent)."""
    spec = profile.get("speculation") if isinstance(profile.get("speculation"), dict) else {}
    sampling = profile.get("sampling") if isinstance(profile.get("sampling"), dict) else {}
    method = spec.get("method") if isinstance(spec.get("method"), str) and spec["method"] in METHODS else "none"
    top = spec.get("max_speculative_tokens")
    max_gamma = top if _whole(top) and 1 <= top <= MAX_SPECULATIVE_TOKENS else 8
    gamma = spec.get("num_speculative_tokens", 0)
    if method == "none" or not (gamma == "auto" or _whole(gamma) and 1 <= gamma <= MAX_SPECULATIVE_TOKENS):
        gamma = 0
    temperature = sampling.get("temperature")
    finite = _whole(temperature) or isinstance(temperature, float) and math.isfinite(temperature)
    low, high = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    bound = sampling.get("max_new_tokens")
    lookup = (low, high) if _whole(low) and _whole(high) and 1 <= low <= high <= MAX_SPECULATIVE_TOKENS else (1, 3)
    return {"method": method, "num_speculative_tokens": gamma, "max_gamma": max(max_gamma, gamma if gamma != "auto" else 0),
            "temperature": float(temperature) if finite and temperature >= 0 else None,
            "prompt_lookup": lookup, "max_new_tokens": bound if _whole(bound) and bound >= 1 else None}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def recording_telemetry(recording: Recording, max_gamma: int | None = None) -> ChatTelemetry:
    """The fold for a recording's steps, set up as the live one was: ``max_gamma``
    defaults to the profile's ``max_speculative_tokens`` (8 if absent), or the server's
    γ, and a server's session leaves out what a server cannot support."""
    from specchat.remote.servers import UNDERIVABLE, is_server_session, server_fields

    server = is_server_session(recording.header.models)
    if max_gamma is None:
        max_gamma = (server_fields(recording.header.models) if server
                     else recorded_settings(recording.header.profile))["max_gamma"]
    return ChatTelemetry(max_gamma=max_gamma, underivable=UNDERIVABLE if server else ())


def rebuild_metrics(recording: Recording, max_gamma: int | None = None) -> MetricsSnapshot:
    """The session's speculation figures, recomputed from the recorded StepStats exactly
    as the live turn loop computes them (the same fold fed every step; a new turn starts
    the time-to-first-token clock). ``max_gamma``: see :func:`recording_telemetry`."""
    telemetry = recording_telemetry(recording, max_gamma)
    for timed in recording.events:
        telemetry.replay(timed.event)
    return telemetry.session
