"""Recording and export files: private, one per chat, never clobbered, and a failure to
write them never stops the chat nor loses what was already written."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from specchat.events import ChatReset, Notice, TurnFinished, UserMessage
from specchat.sessions.fileformat import sessions_dir
from specchat.sessions.reader import read_recording
from specchat.sessions.recorder import Recorder, RecordingBusy, build_header
from specchat.sessions.recording_backend import RecordingBackend
from tests.support import ROOT
from tests.support.sessions_helpers import cli, sample_events

PROFILE = SimpleNamespace(name="tiny", record=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask():
    old = os.umask(0o002)  # what a desktop session often has: files 0664, dirs 0775
    yield
    os.umask(old)


def test_recordings_and_exports_are_private(loose_umask, tmp_path, monkeypatch):
    sessions_dir().mkdir(parents=True)
    sessions_dir().chmod(0o755)  # a sessions dir left by an older version
    with Recorder.for_profile(PROFILE) as rec:
        rec.start(build_header({"name": "tiny"}))
        for event in sample_events():
            rec.record(event)
    assert mode(sessions_dir()) == 0o700 and mode(rec.path) == 0o600
    fresh = tmp_path / "elsewhere" / "data"
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(fresh))
    with Recorder.for_profile(PROFILE) as other:
        other.start(build_header({"name": "tiny"}))
        other.record(sample_events()[0])
    assert mode(fresh / "sessions") == 0o700 and mode(other.path) == 0o600
    for fmt in ("md", "cast"):
        proc = cli("export", str(rec.path), "-f", fmt, env_dir=tmp_path / "data")
        assert proc.returncode == 0, proc.stderr
        assert mode(rec.path.with_suffix(f".{fmt}")) == 0o600


def test_concurrent_chats_never_share_a_file():
    """Many recorders of one profile started in the same second: one file each, each
    with its one header — in threads here, in processes below."""
    recorders = [Recorder.for_profile(PROFILE) for _ in range(6)]
    barrier = threading.Barrier(len(recorders))

    def chat(rec):
        barrier.wait()
        rec.start(build_header({"name": "tiny"}))
        for event in sample_events():
            rec.record(event)
        rec.close()

    threads = [threading.Thread(target=chat, args=(r,)) for r in recorders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    paths = {r.path for r in recorders}
    assert len(paths) == 6
    for path in paths:
        recording = read_recording(path)
        assert recording.damage is None and not recording.later_headers
        assert len(recording.events) == len(sample_events())


TWO_PROCESSES = """
import sys, time
from types import SimpleNamespace
from specchat.sessions.recorder import Recorder, build_header
from tests.support.sessions_helpers import sample_events
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))
rec = Recorder.for_profile(SimpleNamespace(name="tiny", record=True))
rec.start(build_header({"name": "tiny"}))
for _ in range(20):
    for event in sample_events():
        rec.record(event)
rec.close()
print(rec.path)
"""


def test_two_processes_started_together_get_two_files(tmp_path):
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = str(time.time() + 1.0)
    procs = [subprocess.Popen([sys.executable, "-c", TWO_PROCESSES, start], stdout=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT) for _ in range(2)]
    paths = {Path(p.communicate(timeout=60)[0].strip()) for p in procs}
    assert len(paths) == 2 and all(p.returncode == 0 for p in procs)
    for path in paths:
        recording = read_recording(path)
        assert recording.damage is None and len(recording.events) == 20 * len(sample_events())


def test_a_recording_in_use_is_not_carried_on_by_another_writer():
    with Recorder.for_profile(PROFILE) as live:
        live.start(build_header({"name": "tiny"}))
        live.record(sample_events()[0])
        with pytest.raises(RecordingBusy, match="another specchat is writing this recording"):
            Recorder.append_to(live.path).start(build_header({"name": "tiny"}))
    resumed = Recorder.append_to(live.path)
    resumed.start(build_header({"name": "tiny"}))  # free once the chat has ended
    resumed.close()
    assert len(read_recording(live.path).later_headers) == 1


class Chat:
    """A ChatBackend with a fixed two-step reply."""

    def __init__(self):
        self.turn = 0

    def send(self, text):
        self.turn += 1
        for event in sample_events()[:6]:
            yield event if not isinstance(event, UserMessage) else UserMessage(self.turn, text)

    def cancel(self):
        pass


def full_disk_after(monkeypatch, good_writes: int) -> None:
    """The recorder's writes fail with ENOSPC after ``good_writes``, the failing one
    half-written first (as a full disk does)."""
    calls = {"n": 0}
    real = Recorder._write_bytes

    def write(self, data):
        calls["n"] += 1
        if calls["n"] > good_writes:
            real(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, data)

    monkeypatch.setattr(Recorder, "_write_bytes", write)


def test_a_full_disk_stops_recording_not_the_chat(monkeypatch):
    full_disk_after(monkeypatch, good_writes=4)  # the header and three events
    recorder = Recorder.for_profile(PROFILE)
    recorder.start(build_header({"name": "tiny"}))
    backend = RecordingBackend(Chat(), recorder)
    first = list(backend.send("hello"))
    second = list(backend.send("again"))
    recorder.close()
    notices = [e for e in first + second if isinstance(e, Notice)]
    assert len(notices) == 1 and "No space left on device" in notices[0].message  # one warning
    assert "the chat goes on unrecorded, 4 events kept" in notices[0].message
    assert sum(isinstance(e, TurnFinished) for e in first + second) == 2  # the chat went on
    recording = read_recording(recorder.path)  # every event written before the failure, whole
    assert [type(t.event).__name__ for t in recording.events] == ["UserMessage", "TurnStarted", "StepEvent"]
    assert recording.path.read_bytes().endswith(b"\n")  # the half-written line was dropped
    assert "middle of turn 1" in recording.damage.reason


def test_closing_mid_turn_closes_the_turn_as_cancelled_with_its_text(tmp_path):
    """The app quits while a step it cannot interrupt runs on: whatever the turn recorded
    stays a turn (cancelled, with its steps' text), not a damaged file; a finished turn
    gets nothing more."""
    events = sample_events()
    recorder = Recorder(tmp_path / "cut.jsonl")
    recorder.start(build_header({"name": "tiny"}))
    for event in events[:4]:  # turn 1's message, start and two of its three steps
        recorder.record(event)
    recorder.close()
    recording = read_recording(tmp_path / "cut.jsonl")
    assert recording.damage is None
    last = recording.events[-1].event
    assert isinstance(last, TurnFinished) and (last.turn, last.finish_reason, last.text) == (1, "cancelled", "Hello, world\n!")

    reset = Recorder(tmp_path / "reset.jsonl")  # a cut turn carried, then a new chat: nothing left open
    reset.start(build_header({"name": "tiny"}))
    for event in [*events[:4], ChatReset()]:
        reset.record(event)
    reset.close()
    recording = read_recording(tmp_path / "reset.jsonl")
    assert recording.damage is None and isinstance(recording.events[-1].event, ChatReset)

    whole = Recorder(tmp_path / "whole.jsonl")
    whole.start(build_header({"name": "tiny"}))
    for event in events:
        whole.record(event)
    whole.close()
    assert [type(t.event) for t in read_recording(tmp_path / "whole.jsonl").events] == [type(e) for e in events]


def test_an_unwritable_sessions_dir_is_one_warning_and_the_chat_goes_on(tmp_path, monkeypatch, tiny_profile_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(blocker / "data"))  # mkdir fails, as root too
    recorder = Recorder.for_profile(PROFILE)
    recorder.start(build_header({"name": "tiny"}))
    failure = recorder.take_failure()
    assert failure.startswith("not recording: cannot create a recording in") and "Not a directory" in failure
    assert recorder.take_failure() is None  # said once
    events = list(RecordingBackend(Chat(), recorder).send("hello"))
    assert isinstance(events[-1], TurnFinished) and not any(isinstance(e, Notice) for e in events)
    recorder.close()
    from specchat.live import LiveLoader  # the TUI's loader: the warning the app shows once

    loaded = LiveLoader(record=True)(str(tiny_profile_path), lambda _: None)
    assert loaded.info.warning.startswith("not recording") and loaded.info.recording is None
    assert isinstance(list(loaded.backend.send("hi"))[-1], TurnFinished)
    loaded.close()
    if os.geteuid() != 0:  # a read-only dir (root writes anyway)
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        monkeypatch.setenv("SPECCHAT_DATA_DIR", str(ro))
        recorder = Recorder.for_profile(PROFILE)
        recorder.start(build_header({"name": "tiny"}))
        assert "Permission denied" in recorder.take_failure()


def test_run_on_an_unwritable_data_dir_and_undecodable_input(tiny_profile_path, tmp_path, monkeypatch, capsys):
    """`specchat run`: one stderr line, exit 0, the reply printed; invalid UTF-8 in the
    prompt is decoded once at the edge and recorded as U+FFFD."""
    from specchat.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(blocker / "data"))
    assert main(["run", "--profile", str(tiny_profile_path), "--prompt", "hi"]) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "not recording" in warnings[0] and "Traceback" not in err and out.strip()
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    assert main(["run", "--profile", str(tiny_profile_path), "--prompt", "bad \udcff byte"]) == 0
    (path,) = (tmp_path / "data" / "sessions").glob("*.jsonl")
    assert read_recording(path).events[0].event.text == "bad \ufffd byte"


def test_the_tui_warns_once_when_recording_fails_and_keeps_chatting(tiny_profile_path, monkeypatch):
    from tests.support.pilot import SIZE, wait_for
    from specchat.live import LiveLoader
    from specchat.ui.app import SpecchatApp
    from specchat.ui.widgets.reply import NoteView

    full_disk_after(monkeypatch, good_writes=3)  # the header, the first prompt, its TurnStarted

    async def run():
        app = SpecchatApp(str(tiny_profile_path), loader=LiveLoader(record=True))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.loaded is not None and app.loading is None, what="the profile")
            for prompt in ("bad \udcff byte", "and again"):
                before = app.turns_ended
                app.chat.input.text = prompt
                await pilot.press("enter")
                await wait_for(pilot, lambda: app.turns_ended > before, what="the turn")
            await pilot.pause(0.1)
            notes = [str(view.render()) for view in app.chat.query(NoteView)]
            return notes, len(app.chat.transcript.replies), app.info.recording

    notes, replies, path = asyncio.run(run())
    assert replies == 2
    assert sum("recording stopped" in n for n in notes) == 1 and not any("generation failed" in n for n in notes)
    events = read_recording(path).events
    assert [e.event.text for e in events[:1]] == ["bad \ufffd byte"] and len(events) == 2


# --- exports never clobber --------------------------------------------------------

def test_export_never_writes_over_its_input_nor_another_file_without_force(tmp_path):
    data = tmp_path / "data"
    recording = data / "sessions" / "chat.md"  # a recording whose name ends in .md
    recording.parent.mkdir(parents=True)
    with Recorder(recording) as rec:
        rec.start(build_header({"name": "tiny"}))
        for event in sample_events():
            rec.record(event)
    original = recording.read_bytes()

    proc = cli("export", str(recording), env_dir=data)  # the default name would be its own
    assert proc.returncode == 0 and (recording.parent / "chat.md.md").is_file()
    for args in (("-o", str(recording)), ("-o", str(recording), "--force")):
        proc = cli("export", str(recording), *args, env_dir=data)
        lines = [x for x in proc.stderr.splitlines() if not x.startswith("HEAVY=")]
        assert proc.returncode == 2 and len(lines) == 1 and "over the recording it comes from" in lines[0]
    assert recording.read_bytes() == original

    other = tmp_path / "notes.md"
    other.write_text("mine")
    proc = cli("export", str(recording), "-o", str(other), env_dir=data)
    assert proc.returncode == 2 and "already exists" in proc.stderr and "--force" in proc.stderr
    assert other.read_text() == "mine"
    proc = cli("replay", str(recording), "--to", "md", "-o", str(other), "--force", env_dir=data)
    assert proc.returncode == 0 and other.read_text().startswith("# specchat session")
    assert json.loads(original.splitlines()[0])["type"] == "SessionHeader"
