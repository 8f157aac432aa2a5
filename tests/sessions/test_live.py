"""Recording a real (tiny) model: crash safety under SIGKILL, live == recorded == replayed,
resume, and the TUI driven by a replay exactly as by the live chat."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from specchat.events import ErrorEvent, StepEvent, TurnFinished, to_json
from specchat.live import resume_loader
from specchat.sessions.ansi import clean
from specchat.sessions.reader import read_recording
from specchat.sessions.replay_backend import ReplayBackend
from specchat.sessions.resume import resume_from
from tests.support import ROOT
from tests.support.sessions_helpers import cli, heavy
from tests.support.tiny_models import write_tiny_profile


def norm(events) -> list[dict]:
    """Events as the JSON a recording holds (tuples become lists), for comparison."""
    return [json.loads(json.dumps(to_json(e))) for e in events]


@pytest.fixture(scope="module")
def long_profile(tmp_path_factory, tiny_model_dir, tiny_draft_dir):
    """The tiny draft-model pair with room for a longer reply (so a kill lands mid-reply)."""
    path = tmp_path_factory.mktemp("profiles") / "tiny-long.toml"
    return write_tiny_profile(path, tiny_model_dir, tiny_draft_dir, max_new_tokens=24)


def _load(profile):
    from specchat.live import load_backend

    return load_backend(str(profile), lambda _: None, record=True)


def test_live_recorded_and_replayed_sequences_are_identical(long_profile):
    loaded = _load(long_profile)
    live = list(loaded.backend.send("hello there"))
    second = []
    for event in loaded.backend.send("tell me more"):  # cancelled after its first step
        second.append(event)
        if isinstance(event, StepEvent):
            loaded.backend.cancel()
    live += second
    history = list(loaded.backend.history)
    loaded.close()
    assert second[-1].finish_reason == "cancelled"
    recording = read_recording(loaded.info.recording)
    assert recording.damage is None
    assert recording.header.profile["name"] == "tiny-long"
    header = recording.header
    assert header.models["target"]["dtype"] == "float32" and header.models["device"] == "cpu"
    assert header.environment["torch"].startswith("2.") and "transformers" in header.environment
    assert norm(t.event for t in recording.events) == norm(live)
    assert norm(ReplayBackend(loaded.info.recording, speed="max").events()) == norm(live)
    assert resume_from(loaded.info.recording).history == history


CHILD = """
import json, sys
from specchat.events import to_json
from specchat.live import load_backend
from specchat.sessions.ansi import clean
loaded = load_backend(sys.argv[1], lambda e: None, record=True)
print("RECORDING " + str(loaded.info.recording), flush=True)
for prompt in ("first prompt", "second prompt"):
    for event in loaded.backend.send(prompt):
        print("EVENT " + json.dumps(to_json(event)), flush=True)
        sys.stdin.readline()  # the parent lets it go on, or SIGKILLs it here, mid-reply
"""


def test_sigkill_mid_reply_loses_nothing_before_the_kill(long_profile, tmp_path):
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(long_profile)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    seen, path, steps_in_turn_2 = [], None, 0
    try:
        for line in child.stdout:
            if line.startswith("RECORDING "):
                path = line.split(" ", 1)[1].strip()
                continue
            event = json.loads(line.split(" ", 1)[1])
            seen.append(event)
            if event["type"] == "StepEvent" and event["turn"] == 2:
                steps_in_turn_2 += 1
                if steps_in_turn_2 == 2:
                    child.send_signal(signal.SIGKILL)
                    break
            child.stdin.write("\n")
            child.stdin.flush()
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert steps_in_turn_2 == 2, "the reply ended before the kill; lengthen it"
    recording = read_recording(path)
    assert norm(t.event for t in recording.events) == seen  # every event before the kill
    assert "middle of turn 2" in recording.damage.reason
    replayed = list(ReplayBackend(path, speed="max").events())
    assert norm(replayed[:-1]) == seen
    assert isinstance(replayed[-1], ErrorEvent) and "middle of turn 2" in replayed[-1].message
    # and the headless replay, with torch blocked, shows the interrupted reply
    proc = cli("replay", path, "--headless", "--speed", "max", env_dir=tmp_path / "data")
    partial = "".join(t["text"] for e in seen if e["type"] == "StepEvent" and e["turn"] == 2
                      for t in e["step"]["tokens"])
    assert proc.returncode == 1 and heavy(proc) == []
    assert "you › second prompt" in proc.stdout
    assert clean(partial).replace("\r\n", "\n").strip() in proc.stdout  # control characters are never replayed
    assert "middle of turn 2" in proc.stderr
    resumed = resume_from(path)
    assert resumed.pending == "second prompt" and len(resumed.history) == 2


def test_resume_continues_the_conversation_in_the_same_file(tiny_profile_path):
    first = _load(tiny_profile_path)
    list(first.backend.send("remember the word lighthouse"))
    history = list(first.backend.history)
    first.close()
    path = first.info.recording
    loaded = resume_loader(path)(None, lambda _: None)
    assert loaded.info.recording == path and loaded.backend.history == history
    events = list(loaded.backend.send("which word?"))
    loaded.close()
    assert events[0].turn == 2 and isinstance(events[-1], TurnFinished)
    recording = read_recording(path)
    assert recording.damage is None and len(recording.later_headers) == 1
    assert [e.event.turn for e in recording.events if isinstance(e.event, TurnFinished)] == [1, 2]
    assert resume_from(path).history == loaded.backend.history
