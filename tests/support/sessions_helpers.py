"""Shared checks for the session tests: a hand-built event stream (for file-handling unit
tests only — acceptance tests record a real tiny model) and an asciinema v2 validator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from specchat.events import (
    Alternative,
    ChatReset,
    ProfileSwitched,
    Step,
    StepEvent,
    StepStats,
    Token,
    TurnFinished,
    TurnStarted,
    UserMessage,
)
from tests.support import ROOT


def _step(turn: int, texts: list[tuple[str, str]], k: int, n: int, t: float) -> StepEvent:
    tokens = tuple(
        Token(id=100 + i, kind=kind, p=0.5, q=0.6 if kind == "accepted" else None, text=text,
              alternatives=(Alternative(id=7, p=0.2, text="x"),),
              rejected_id=9 if kind == "resampled" else None, rejected_p=0.1 if kind == "resampled" else None,
              rejected_q=0.7 if kind == "resampled" else None)
        for i, (kind, text) in enumerate(texts)
    )
    stats = StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=n,
                      alpha_sum=0.7 * min(k, n + 1), alpha_count=min(k, n + 1), draft_forwards=k,
                      draft_ms=2.0 * k, verify_ms=10.0 + k, total_ms=12.0 + 3 * k)
    return StepEvent(turn=turn, step=Step(tokens=tokens, stats=stats), t=t)


def sample_events() -> list:
    """Two turns (the second cancelled), a profile switch and a reset."""
    return [
        UserMessage(turn=1, text="Say hello\nin two lines"),
        TurnStarted(turn=1, prompt_tokens=12, num_speculative_tokens=3),
        _step(1, [("accepted", "Hel"), ("accepted", "lo"), ("resampled", ",")], 3, 2, 0.02),
        _step(1, [("accepted", " wor"), ("accepted", "ld"), ("accepted", "\n"), ("bonus", "!")], 3, 3, 0.05),
        _step(1, [("target", " bye")], 0, 0, 0.06),
        TurnFinished(turn=1, finish_reason="eos", text="Hello, world\n! bye",
                     metrics={"turn": {"num_tokens": 8, "tokens_per_s": 90.0, "num_drafts": 2,
                                       "mean_acceptance_length": 3.5}}, t=0.07),
        ProfileSwitched(name="ngram"),
        UserMessage(turn=2, text="Count to ten"),
        TurnStarted(turn=2, prompt_tokens=30, num_speculative_tokens=2),
        _step(2, [("accepted", "1"), ("resampled", " 2")], 2, 1, 0.01),
        TurnFinished(turn=2, finish_reason="cancelled", text="1 2", t=0.02),
        ChatReset(),
    ]


def validate_cast(path: Path) -> tuple[dict, list]:
    """Checks asciinema's asciicast v2 structure; returns (header, events)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines, "empty cast"
    header = json.loads(lines[0])
    assert isinstance(header, dict)
    assert header["version"] == 2
    for key in ("width", "height", "timestamp"):
        assert isinstance(header[key], int) and not isinstance(header[key], bool), key
    assert header["width"] > 0 and header["height"] > 0
    assert isinstance(header.get("title", ""), str)
    env = header.get("env", {})
    assert isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    events = []
    last = 0.0
    for number, line in enumerate(lines[1:], start=2):
        event = json.loads(line)
        assert isinstance(event, list) and len(event) == 3, f"line {number}: not a 3-list"
        t, kind, data = event
        assert isinstance(t, (int, float)) and not isinstance(t, bool), f"line {number}: time"
        assert t >= last, f"line {number}: time goes backwards ({t} < {last})"
        assert kind == "o", f"line {number}: type {kind!r}"
        assert isinstance(data, str), f"line {number}: data"
        last = t
        events.append(event)
    return header, events



# Runs the real CLI in a fresh interpreter where importing torch or transformers fails,
# as on a machine without them, and reports which heavy modules got imported anyway.
TORCH_BLOCKED = textwrap.dedent(
    """
    import importlib.abc, json, sys
    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "transformers"):
                raise ImportError(f"{name} is blocked in this test")
            return None
    sys.meta_path.insert(0, Blocked())
    from specchat.cli import main
    code = main(sys.argv[1:])
    heavy = sorted(m for m in ("torch", "transformers", "textual") if m in sys.modules)
    print("HEAVY=" + json.dumps(heavy), file=sys.stderr)
    sys.exit(code)
    """
)


def cli(*args: str, env_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(env_dir), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", TORCH_BLOCKED, *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)


def heavy(proc: subprocess.CompletedProcess) -> list[str]:
    line = [x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")][-1]
    return json.loads(line[len("HEAVY="):])


def killed_after(path: Path, events: int) -> Path:
    """The recording at ``path`` as a process killed after its first ``events`` events left
    it: the header and those lines, never closed (a close ends an open turn as cancelled)."""
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:1 + events]))
    return path
