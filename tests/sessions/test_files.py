"""Recording file handling, replay timing, damage reports, resume, exports and history.

These tests use hand-built event streams (tests/support/sessions_helpers.py) because they test
the file layer; recording a real model is in sessions/test_live.py."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from specchat.events import ErrorEvent, ProfileSwitched, SessionHeader, UserMessage
from specchat.sessions.export_cast import cast_text
from specchat.sessions.export_markdown import to_markdown
from specchat.sessions.history import list_sessions
from specchat.sessions.reader import RecordingError, read_recording
from specchat.sessions.recorder import Recorder, build_header
from specchat.sessions.replay import parse_speed, rebuild_metrics, replay_events
from specchat.sessions.replay_backend import ReplayBackend
from specchat.sessions.resume import resume_from
from tests.support.sessions_helpers import killed_after, sample_events, validate_cast

PROFILE = {"name": "tiny", "speculation": {"method": "draft_model", "num_speculative_tokens": 3,
                                           "max_speculative_tokens": 8}, "target": {"source": "/models/t"}}


def record(path, events, profile=PROFILE, *, killed=False):
    """``killed``: the process died after the last event, so it never closed the file (a
    close ends an open turn as cancelled): the file holds the events and nothing more."""
    with Recorder(path) as rec:
        rec.start(build_header(profile, {"target": {"source": "/models/t"}, "torch_version": "2.x"}))
        for ev in events:
            rec.record(ev)
    return killed_after(path, len(events)) if killed else path


def test_round_trip_keeps_every_event_and_the_header(tmp_path):
    events = sample_events()
    path = record(tmp_path / "s.jsonl", events)
    rec = read_recording(path)
    assert [t.event for t in rec.events] == events
    assert rec.damage is None
    assert rec.header.profile["name"] == "tiny"
    assert rec.header.environment["torch_version"] == "2.x" and "python" in rec.header.environment
    assert rec.header.models == {"target": {"source": "/models/t"}}
    stamps = [rec.header_ts] + [t.ts for t in rec.events]
    assert stamps == sorted(stamps)
    first = json.loads(path.read_text().splitlines()[0])
    assert first["type"] == "SessionHeader" and first["format"] == 1


def test_disabled_recorder_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))

    class P:
        name = "x"
        record = False

    rec = Recorder.for_profile(P())
    assert not rec.enabled
    rec.start(build_header({"name": "x"}))
    rec.record(UserMessage(1, "hi"))
    rec.close()
    assert not (tmp_path / "sessions").exists()
    assert not Recorder.for_profile(type("Q", (), {"name": "y", "record": True})(), enabled=False).enabled
    on = Recorder.for_profile(type("Q", (), {"name": "my profile/1", "record": True})())
    assert on.enabled and on.path is None  # named when the file is created, by start()
    on.start(build_header({"name": "my profile/1"}))
    assert on.path.parent == tmp_path / "sessions" and on.path.name.endswith("_my-profile-1.jsonl")
    assert json.loads(on.path.read_text())["type"] == "SessionHeader"  # the header, at creation
    on.close()
    assert not list((tmp_path / "sessions").iterdir())  # nothing but a header: no empty entry


def test_truncated_last_line_replays_up_to_it_and_says_where(tmp_path):
    events = sample_events()
    path = record(tmp_path / "s.jsonl", events)
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: last_start + 15])  # a kill in the middle of writing the last line
    n_lines = len(data.decode().splitlines())
    rec = read_recording(path)
    assert [t.event for t in rec.events] == events[:-1]
    assert rec.damage.line == n_lines
    assert "cut short" in rec.damage.reason
    replayed = [ev for _, ev in replay_events(rec, "max")]
    assert replayed[:-1] == events[:-1]
    assert isinstance(replayed[-1], ErrorEvent)
    assert f"line {n_lines}" in replayed[-1].message and str(path) in replayed[-1].message


def test_corrupt_middle_line_stops_there(tmp_path):
    events = sample_events()
    path = record(tmp_path / "s.jsonl", events)
    lines = path.read_text().splitlines()
    lines[4] = lines[4][:30] + "\x00garbage"
    lines[6] = '{"type": "NoSuchEvent"}'
    path.write_text("\n".join(lines) + "\n")
    rec = read_recording(path)
    assert [t.event for t in rec.events] == events[:3]  # lines 2..4
    assert rec.damage.line == 5 and "not valid JSON" in rec.damage.reason
    lines[4] = '{"type": "NoSuchEvent"}'
    path.write_text("\n".join(lines) + "\n")
    assert "unknown event type 'NoSuchEvent'" in read_recording(path).damage.reason


def test_recording_cut_mid_turn_is_reported(tmp_path):
    events = sample_events()[:4]  # UserMessage, TurnStarted, two steps
    path = record(tmp_path / "s.jsonl", events, killed=True)
    rec = read_recording(path)
    assert [t.event for t in rec.events] == events
    assert "middle of turn 1" in rec.damage.reason


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty recording"),
        ("hello\n", "not a specchat recording: line 1"),
        ('{"type": "UserMessage", "turn": 1, "text": "x"}\n', "expected a SessionHeader"),
        ('{"type":"SessionHeader","specchat_version":"9","profile":{},"format":99}\n', "written by a newer specchat"),
        # a future header whose fields (even its type) changed is still named as one
        ('{"type":"Header","session":{"v":3},"format":2}\n', "written by a newer specchat (recording format 2"),
        ('{"type":"SessionHeader","specchat_version":1,"profile":{}}\n', "field 'specchat_version' must be a string"),
        ('{"type": "SessionHeader", "specchat_ver', "line 1 is cut short (the session was interrupted while writing it): "
                                                  "not valid JSON (Unterminated string starting at, column"),
    ],
)
def test_unreadable_files_give_one_clear_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(RecordingError) as info:
        read_recording(path)
    text = str(info.value)
    assert message in text and str(path) in text and "\n" not in text


def test_missing_file(tmp_path):
    from specchat.sessions.locate import locate

    with pytest.raises(RecordingError, match="no such recording"):
        read_recording(tmp_path / "nope.jsonl")
    for read in (read_recording, lambda path: locate(str(path))):
        with pytest.raises(RecordingError, match="a folder, not a recording"):
            read(tmp_path)


def test_replay_timing_scales_and_clamps_user_idle(tmp_path):
    path = record(tmp_path / "s.jsonl", sample_events())
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    base = 1000.0
    for i, d in enumerate(lines):  # a 0.1 s step pace, and a 60 s pause before turn 2
        d["ts"] = base + 0.1 * i + (60.0 if i >= 8 else 0.0)
    path.write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    one = [d for d, _ in replay_events(path, 1)]
    two = [d for d, _ in replay_events(path, "2")]
    assert one[0] == pytest.approx(0.1) and max(one) == pytest.approx(1.5)  # idle clamped
    assert two == pytest.approx([d / 2 for d in one])
    assert all(d == 0 for d, _ in replay_events(path, "max"))
    assert parse_speed("max") == math.inf
    with pytest.raises(ValueError, match="--speed 'fast-ish'"):
        parse_speed("fast-ish")
    with pytest.raises(ValueError, match="positive"):
        parse_speed("0")


def test_replay_backend_yields_the_recorded_events_and_cancels(tmp_path):
    events = sample_events()
    path = record(tmp_path / "s.jsonl", events)
    backend = ReplayBackend(path, speed="max")
    assert backend.recording.profile_name == "tiny" and isinstance(backend.recording.header, SessionHeader)
    assert list(backend.events()) == events
    backend = ReplayBackend(path, speed=1)
    it = backend.events()
    assert next(it) == events[0]
    backend.cancel()
    assert list(it) == []


def test_resume_rebuilds_history_and_keeps_an_unanswered_prompt(tmp_path):
    events = sample_events()
    resumed = resume_from(record(tmp_path / "a.jsonl", events[:-1]))
    assert resumed.history == [
        {"role": "user", "content": "Say hello\nin two lines"},
        {"role": "assistant", "content": "Hello, world\n! bye"},
        {"role": "user", "content": "Count to ten"},
        {"role": "assistant", "content": "1 2"},  # cancelled: the partial reply is kept
    ]
    assert resumed.pending is None
    assert resume_from(record(tmp_path / "b.jsonl", events)).history == []  # ends with a reset
    cut = resume_from(record(tmp_path / "c.jsonl", events[:9], killed=True))
    assert len(cut.history) == 2 and cut.pending == "Count to ten" and cut.damage is not None


def test_rebuilt_metrics_follow_telemetry_definitions(tmp_path):
    rec = read_recording(record(tmp_path / "s.jsonl", sample_events()))
    m = rebuild_metrics(rec)
    # drafting steps: (k=3,n=2), (3,3), (2,1) → 6 accepted of 8 drafted over 3 drafts
    assert m.num_drafts == 3 and m.num_tokens == 10
    assert m.mean_acceptance_length == pytest.approx(3.0)
    assert m.draft_acceptance_rate == pytest.approx(0.75)
    assert m.acceptance_histogram[:4] == (0, 1, 1, 1)


def write_cast(recording, out):
    """The .cast of a recording, written as `specchat export --format cast` writes it."""
    out.write_text(cast_text(read_recording(recording)), encoding="utf-8")
    return out


def test_cast_export_is_valid_asciicast_v2_with_provenance_colours(tmp_path):
    path = record(tmp_path / "s.jsonl", sample_events())
    header, events = validate_cast(write_cast(path, tmp_path / "s.cast"))
    assert "tiny" in header["title"]
    out = "".join(e[2] for e in events)
    assert "\x1b[32mHel\x1b[0m" in out  # accepted: green
    assert "\x1b[33m,\x1b[0m" in out  # resampled: yellow
    assert "\x1b[36m!\x1b[0m" in out  # bonus: cyan
    assert " bye" in out and "Say hello\r\nin two lines" in out
    assert "\n" not in out.replace("\r\n", "")  # raw terminal: CR LF only


def test_cast_never_replays_escape_sequences_from_model_text(tmp_path):
    events = sample_events()
    events[0] = UserMessage(turn=1, text="evil \x1b]0;title\x07 \x1b[2J")
    header, cast = validate_cast(write_cast(record(tmp_path / "s.jsonl", events), tmp_path / "s.cast"))
    user = next(e[2] for e in cast if "evil" in e[2])
    assert "\x1b]" not in user and "\x1b[2J" not in user


def test_markdown_has_the_transcript_and_the_metrics(tmp_path):
    md = to_markdown(read_recording(record(tmp_path / "s.jsonl", sample_events())))
    assert "> Say hello\n> in two lines" in md
    assert "Hello, world\n! bye" in md and "_(cancelled)_" in md and "**Assistant**:" in md
    events = sample_events()
    events[5] = dataclasses.replace(events[5], finish_reason="length")
    md = to_markdown(read_recording(record(tmp_path / "l.jsonl", events)))
    assert "**Assistant** _(stopped: max\\_new\\_tokens reached)_:" in md  # in words, not the code
    assert "[turn 1: stopped: max_new_tokens reached · " in cast_text(read_recording(tmp_path / "l.jsonl"))
    events[10] = dataclasses.replace(events[10], finish_reason="context", text="")
    events[9] = dataclasses.replace(events[9], step=dataclasses.replace(events[9].step, tokens=()))
    md = to_markdown(read_recording(record(tmp_path / "e.jsonl", events)))
    assert "**Assistant** _(stopped: context window full)_:\n\n_(nothing generated)_" in md
    assert "| mean acceptance length (tokens per verification) | 3.00 |" in md
    assert "| draft acceptance rate | 75.0 % |" in md
    assert "| α (alpha, measured) |" in md and "| c (cost ratio" in md
    assert "predicted speedup" in md and "| tokens/s |" in md and "| 3 | 1 |" in md


def test_history_lists_sessions_newest_first_and_survives_bad_files(tmp_path):
    d = tmp_path / "sessions"
    d.mkdir()
    record(d / "a.jsonl", sample_events())
    record(d / "b.jsonl", sample_events()[:3], killed=True)
    (d / "c.jsonl").write_text("not json\n")
    rows = {r.path.name: r for r in list_sessions(d)}
    assert rows["a.jsonl"].profile == "tiny" and rows["a.jsonl"].first_prompt == "Say hello in two lines"
    assert rows["a.jsonl"].tokens == 10 and rows["a.jsonl"].mean_acceptance_length == pytest.approx(3.0)
    assert rows["a.jsonl"].turns == 2 and rows["a.jsonl"].problem is None
    assert "middle of turn 1" in rows["b.jsonl"].problem and rows["b.jsonl"].replayable
    assert "not a specchat recording" in rows["c.jsonl"].problem and not rows["c.jsonl"].replayable
    assert list_sessions(tmp_path / "none") == []


def test_profile_switch_keeps_one_file_with_the_new_header_aside(tmp_path):
    path = tmp_path / "s.jsonl"
    events = sample_events()
    with Recorder(path) as rec:
        rec.start(build_header(PROFILE))
        rec.record(events[0])
        rec.switch_profile(build_header({"name": "ngram"}, {"target": {"source": "/models/n"}}))
        rec.record(events[1])
    recording = read_recording(path)
    assert [t.event for t in recording.events][:3] == [events[0], ProfileSwitched("ngram"), events[1]]
    assert [t.event.profile["name"] for t in recording.later_headers] == ["ngram"]
    assert recording.later_headers[0].line == 4


def test_recorded_lines_are_what_asdict_gives():
    """to_json skips asdict's deep copy (it runs on the engine's thread once a step); the
    JSON must stay byte for byte what asdict's would be."""
    import dataclasses

    from specchat.events import to_json

    for event in sample_events() + [ErrorEvent("boom", 2), ProfileSwitched(name="x")]:
        expected = {**dataclasses.asdict(event), "type": type(event).__name__}
        assert json.dumps(to_json(event)) == json.dumps(expected)
