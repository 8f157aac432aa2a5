"""A deterministic recorded chat for the UI's snapshot and throughput tests.

The events are built the way the engine builds them (every kind of token, plain
steps that time the target, fixed millisecond costs) and written with the real
Recorder, so the tests drive the TUI through the real replay path.
"""

from __future__ import annotations

import random
from pathlib import Path

from specchat.events import (
    Alternative,
    Step,
    StepEvent,
    StepStats,
    Token,
    TurnFinished,
    TurnStarted,
    UserMessage,
)
from specchat.sessions.recorder import Recorder, build_header
from specchat.telemetry import Telemetry

GAMMA, MAX_GAMMA = 3, 4
PROFILE = {
    "name": "recorded-tiny",
    "description": "a recorded session (deterministic)",
    "speculation": {"method": "draft_model", "num_speculative_tokens": GAMMA, "max_speculative_tokens": MAX_GAMMA},
    "sampling": {"temperature": 0.0},
}
REPLY = (
    "Speculative decoding lets a **small draft model** propose a few tokens, and the "
    "target checks them all in *one* forward pass.\n\n"
    "- accepted drafts cost almost nothing\n"
    "- a rejection is *resampled* from `max(p - q, 0)`\n"
    "- if every draft is kept, a **bonus** token comes free\n"
)


def _words(text: str) -> list[str]:
    out, word = [], ""
    for ch in text:
        if ch in " \n" and word:
            out.append(word)
            word = ""
        word += ch
    return out + ([word] if word else [])


def turn_events(turn: int, prompt: str, n_tokens: int | None = None, seed: int = 0, finish: str = "eos"):
    """UserMessage, TurnStarted, StepEvents…, TurnFinished for one reply.

    ``n_tokens`` repeats the reply's words until that many tokens were emitted.
    """
    rng = random.Random(seed)
    words = _words(REPLY)
    if n_tokens is not None:
        words = (words * (n_tokens // len(words) + 1))[:n_tokens]
    telemetry = Telemetry(max_gamma=MAX_GAMMA)
    telemetry.start_turn()
    events: list = [UserMessage(turn, prompt), TurnStarted(turn, 24, GAMMA)]
    i, t, step_no = 0, 0.0, 0
    while i < len(words):
        plain = step_no % 7 == 0  # every seventh step is a plain one: it times the target (c needs it)
        if plain:
            kinds = ["target"]
            stats = StepStats(0, 0, 0, verify_ms=10.0, total_ms=10.5,
                              prefill_ms=30.0 if step_no == 0 else 0.0, prefill_tokens=24 if step_no == 0 else 0)
        else:
            accepted = rng.choice((0, 1, 2, 3, 3, 2))
            kinds = ["accepted"] * accepted + ["bonus" if accepted == GAMMA else "resampled"]
            alpha_sum = accepted * 0.9 + (0.3 if accepted < GAMMA else 0.0)
            stats = StepStats(GAMMA, GAMMA, accepted, alpha_sum=round(alpha_sum, 3),
                              alpha_count=min(GAMMA, accepted + 1), draft_forwards=GAMMA,
                              draft_ms=3 * 1.5, verify_ms=12.0 + 2 * GAMMA, total_ms=3 * 1.5 + 12.0 + 2 * GAMMA + 0.5)
        tokens = []
        for kind in kinds:
            if i >= len(words):
                break
            p = round(rng.uniform(0.2, 0.95), 3)
            q = round(rng.uniform(0.2, 0.95), 3)
            alts = (Alternative(100 + i, p, words[i]), Alternative(7, round((1 - p) / 2, 3), " the"),
                    Alternative(9, round((1 - p) / 4, 3), ","))
            extra = {}
            if kind == "resampled":
                extra = {"rejected_id": 55, "rejected_p": round(p / 3, 3), "rejected_q": q, "rejected_text": " which"}
            tokens.append(Token(id=100 + i, kind=kind, p=p, q=q if kind == "accepted" else None,
                                alternatives=alts, text=words[i], **extra))
            i += 1
        telemetry.update(stats, len(tokens))
        t += stats.total_ms / 1000
        events.append(StepEvent(turn, Step(tuple(tokens), stats, finish if i >= len(words) else None), round(t, 4)))
        step_no += 1
    snap = telemetry.snapshot().to_dict()
    events.append(TurnFinished(turn, finish, "".join(words), {"turn": snap, "session": snap}, round(t, 4)))
    return events


def write_recording(path: Path, turns: list[list]) -> Path:
    with Recorder(path) as recorder:
        recorder.start(build_header(PROFILE, {"target": "tiny"}))
        for events in turns:
            for event in events:
                recorder.record(event)
    return path
