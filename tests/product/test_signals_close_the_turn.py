"""SIGTERM, SIGHUP and Ctrl+C during `specchat run` cancel the reply: the process exits
with 128 + the signal's number, and its recording ends with a closed, cancelled turn
that our own reader accepts (no damage, nothing mid-turn)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support import ROOT
from tests.support.tiny_models import write_tiny_profile


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", 130)])
def test_a_signal_mid_reply_records_a_cancelled_turn(tmp_path, tiny_model_dir, name, code):
    from specchat.events import StepEvent, TurnFinished
    from specchat.sessions.reader import read_recording

    profile = write_tiny_profile(tmp_path / "tiny.toml", tiny_model_dir, method="ngram", max_new_tokens=100_000)
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "specchat", "run", "--profile", str(profile), "--prompt", "hi"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    sessions = tmp_path / "data" / "sessions"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until a few steps are recorded
        files = list(sessions.glob("*.jsonl")) if sessions.exists() else []
        if files and files[0].read_text().count('"StepEvent"') >= 3:
            break
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the reply never streamed")
    proc.send_signal(getattr(signal, name))
    try:
        _, stderr = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == code, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr
    recording = read_recording(files[0])
    assert recording.damage is None
    last = recording.events[-1].event
    assert isinstance(last, TurnFinished) and last.finish_reason == "cancelled", last
    steps = [t.event for t in recording.events if isinstance(t.event, StepEvent)]
    assert last.text == "".join(token.text for step in steps for token in step.step.tokens)
