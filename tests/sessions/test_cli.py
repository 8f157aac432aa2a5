"""The replay/export/demo commands: torch-blocked subprocesses, clear errors, demo scripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.errors import SpecchatError
from specchat.sessions.demo import DemoStep, load_script, parse_script
from specchat.sessions.recorder import Recorder, build_header
from tests.support.sessions_helpers import cli, heavy, sample_events, validate_cast


@pytest.fixture
def recording(tmp_path) -> Path:
    path = tmp_path / "data" / "sessions" / "2026-11-29T10-00-00_tiny.jsonl"
    path.parent.mkdir(parents=True)
    with Recorder(path) as rec:
        rec.start(build_header({"name": "tiny"}))
        for ev in sample_events():
            rec.record(ev)
    return path


def test_headless_replay_runs_with_torch_blocked(recording, tmp_path):
    proc = cli("replay", "last", "--headless", "--speed", "max", env_dir=tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    assert "you › Say hello\nin two lines" in proc.stdout
    assert "Hello, world\n! bye" in proc.stdout and "[turn 2: cancelled" in proc.stdout
    assert "\x1b[" not in proc.stdout  # not a terminal: no colour codes
    assert heavy(proc) == []


def test_damaged_replay_says_where_it_stopped(recording, tmp_path):
    data = recording.read_bytes()
    recording.write_bytes(data[: len(data) // 2])
    proc = cli("replay", str(recording), "--headless", "--speed", "max", env_dir=tmp_path / "data")
    assert proc.returncode == 1
    assert "Say hello" in proc.stdout  # what came before the damage still plays
    message = [x for x in proc.stderr.splitlines() if x.startswith("specchat replay:")]
    assert len(message) == 1 and str(recording) in message[0] and ", line " in message[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("content, expected", [("garbage\n", "not a specchat recording"), (None, "no such recording")])
def test_unreadable_recording_is_one_line_no_traceback(tmp_path, content, expected):
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content)
    proc = cli("replay", str(path), "--headless", env_dir=tmp_path / "data")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if not x.startswith("HEAVY=")]
    assert len(lines) == 1 and expected in lines[0] and "bad.jsonl" in lines[0]


def test_exports_run_with_torch_blocked(recording, tmp_path):
    out = tmp_path / "s.cast"
    proc = cli("export", str(recording), "--format", "cast", "-o", str(out), env_dir=tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    validate_cast(out)
    proc = cli("replay", str(recording), "--to", "markdown", "-o", "-", env_dir=tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    assert "| mean acceptance length (tokens per verification) | 3.00 |" in proc.stdout
    assert heavy(proc) == []


def test_bad_speed_is_rejected_before_anything_opens(recording, tmp_path):
    proc = cli("replay", str(recording), "--speed", "warp", env_dir=tmp_path / "data")
    assert proc.returncode == 2 and "--speed 'warp': expected 1, 2 or max" in proc.stderr


def test_demo_script_parsing():
    steps = parse_script("# c\nfirst line\nsecond line\n\n/pause 1.5\n/gamma auto\n/gamma 3\n/reset\n"
                         "/temperature 0.7\n/thinking off\nlast\n")
    assert steps == [
        DemoStep("prompt", "first line\nsecond line", 2),
        DemoStep("pause", 1.5, 5),
        DemoStep("gamma", "auto", 6),
        DemoStep("gamma", 3, 7),
        DemoStep("reset", None, 8),
        DemoStep("temperature", 0.7, 9),
        DemoStep("thinking", False, 10),
        DemoStep("prompt", "last", 11),
    ]
    assert [s.action for s in load_script(None)].count("prompt") >= 3  # the shipped tour parses


@pytest.mark.parametrize(
    "text, message",
    [
        ("hi\n/paus 2\n", "demo.txt: unknown directive /paus (line 2) — did you mean /pause?"),
        ("hi\n/gamma lots\n", "/gamma 'lots': expected a whole number"),
        ("hi\n/gamma 17\n", "/gamma '17': expected a whole number of draft tokens (1 to 16)"),  # had no bound
        ("# only comments\n/pause 1\n", "the demo script has no prompts"),
    ],
)
def test_bad_demo_scripts_name_file_and_line(text, message):
    with pytest.raises(SpecchatError) as info:
        parse_script(text, "demo.txt")
    assert message in str(info.value)


@pytest.mark.parametrize("argv, speed", [
    (["--headless"], "max"),  # for scripts: full speed
    (["--headless", "--speed", "1"], "1"),
    ([], "1"),  # the TUI: as recorded
    (["--speed", "2"], "2"),
])
def test_headless_replay_runs_at_full_speed_unless_told(recording, monkeypatch, argv, speed):
    from specchat.cli import main
    from specchat.commands import replay

    seen = []
    monkeypatch.setattr(replay, "_headless", lambda path, speed: seen.append(speed) or 0)
    monkeypatch.setattr(replay, "_tui", lambda path, speed, *trust: seen.append(speed) or 0)
    assert main(["replay", str(recording), *argv]) == 0 and seen == [speed]


def test_headless_replay_ends_quietly_when_its_reader_goes_away(recording, tmp_path):
    """``replay --headless | head``: the pipe closes before the first line is written."""
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    env = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "specchat", "replay", str(recording), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    proc.stdout.close()  # before the child has started Python: its first write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err


def test_a_demo_script_that_is_not_utf8_is_one_line_not_a_traceback(tmp_path):
    """It raised UnicodeDecodeError; untrusted.read_text words it (issue 58, item 4)."""
    script = tmp_path / "tour.txt"
    script.write_bytes(b"caf\xe9\n")
    with pytest.raises(SpecchatError, match=r"cannot read the demo script: byte 3 is not UTF-8 — save it as UTF-8"):
        load_script(script)
