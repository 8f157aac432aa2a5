"""Recordings are untrusted input: every output path shows them inert, and a malformed
one is one clear line naming the file, the line and the field — never a traceback.

The crafted recording (tests/support/crafted.py) puts window-title, clipboard (OSC 52),
clear-screen, DCS, C1 and bidi attacks in every text field: header fields, profile
name, versions, models, finish reasons, metrics keys and values, unknown keys, user
messages, token and alternative text, profile switches and errors. Each output must
keep the visible text (``<tag:>``) and drop the attack.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.sessions.fileformat import sessions_dir
from specchat.sessions.reader import RecordingError, read_recording
from specchat.sessions.resume import resume_from
from tests.support.crafted import TRANSCRIPT_TAGS, assert_inert, crafted_events, evil, header, shown, write_crafted

UNKNOWN_KEY_LINE = json.dumps({"type": "UserMessage", "turn": 3, "text": "late", evil("key"): 1, "ts": 2000.0})


@pytest.fixture
def crafted() -> Path:
    """The crafted recording in the sessions dir (ending in a line with an unknown key),
    next to a whole one whose file name is an attack."""
    path = write_crafted(sessions_dir() / "crafted.jsonl", extra_lines=[UNKNOWN_KEY_LINE])
    write_crafted(sessions_dir() / f"{evil('filename')}.jsonl")
    return path


def run_cli(capsys, *args: str, tty: bool = False, monkeypatch=None) -> tuple[int, str, str]:
    if tty:
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_headless_replay_shows_every_field_inert(crafted, capsys, monkeypatch):
    for tty in (False, True):  # plain for a pipe; coloured on a terminal
        code, out, err = run_cli(capsys, "replay", str(crafted), "--headless", "--speed", "max", tty=tty,
                                 monkeypatch=monkeypatch)
        assert code == 1  # the unknown key damages the last line
        assert_inert(out, colours=tty, where="stdout")
        assert_inert(err, where="stderr")
        plain = _uncoloured(out)
        for tag in (*TRANSCRIPT_TAGS, "version", "profile", "model", "finish", "switched", "error"):
            assert shown(tag) in plain, tag  # the text is kept, only the attack is gone
        (line,) = err.splitlines()
        assert "crafted.jsonl, line 13" in line and "UserMessage has an unknown field '<key:>'" in line


def test_replay_list_marks_bad_files_and_stays_inert(crafted, capsys):
    (sessions_dir() / "broken.jsonl").write_text('{"type": "SessionHeader", "profile": 3}\n')
    code, out, err = run_cli(capsys, "replay", "--list")
    assert code == 0
    assert_inert(out + err)
    rows = out.splitlines()
    assert len(rows) == 3  # one bad file never hides the others
    assert sum(shown("profile") in row for row in rows) == 2
    assert any("broken.jsonl" in row and "field 'specchat_version' is missing" in row for row in rows)
    assert any(shown("filename") in row for row in rows)


@pytest.mark.parametrize("fmt", ["md", "cast"])
def test_exports_are_inert_on_stdout_and_in_files(crafted, capsys, tmp_path, fmt):
    code, out, err = run_cli(capsys, "export", str(crafted), "-f", fmt, "-o", "-")
    assert code == 0 and "exported up to the damage" in err
    assert_inert(err)
    target = tmp_path / f"out.{fmt}"
    assert run_cli(capsys, "replay", str(crafted), "--to", fmt, "-o", str(target))[0] == 0
    raw = target.read_text(encoding="utf-8")
    assert raw == out
    assert_inert(raw)  # safe to `cat`, the .cast too (its JSON escapes our colours)
    if fmt == "cast":
        frames = [json.loads(line) for line in raw.splitlines()]
        assert_inert(frames[0]["title"])
        text = "".join(frame[2] for frame in frames[1:])
        assert_inert(text, colours=True, where="cast frames")
        for tag in TRANSCRIPT_TAGS:
            assert shown(tag) in _uncoloured(text), tag
    else:
        for tag in ("user", "user2", "note", "reply", "reply2", "switched", "error", "profile", "model"):
            assert _md_unescape(shown(tag)) in _md_unescape(raw), tag


def _uncoloured(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _md_unescape(text: str) -> str:
    return text.replace("\\<", "<").replace("\\>", ">")


def test_markdown_export_escapes_what_markdown_would_read(tmp_path):
    from specchat.sessions.export_markdown import to_markdown

    events = crafted_events()
    events[0] = {"type": "UserMessage", "turn": 1, "text": "# not a heading\n<img src=x onerror=alert(1)>\n[x](javascript:alert(1))"}
    events[3] = {**events[3], "text": "````\n</code><script>alert(1)</script>\n````"}
    md = to_markdown(read_recording(write_crafted(tmp_path / "m.jsonl", events)))
    assert "> \\# not a heading" in md and "\\<img src=x onerror=alert(1)\\>" in md
    assert "\\[x\\](javascript:alert(1))" in md
    # the reply sits in a fence longer than any backtick run inside it, verbatim
    assert "`````text\n````\n</code><script>alert(1)</script>\n````\n`````" in md
    assert "- profile: `<profile:>`" in md


def test_tui_replay_shows_every_field_inert(crafted):
    from tests.support.pilot import SIZE, wait_for
    from specchat.ui.app import SpecchatApp
    from specchat.ui.backend import replay_loader
    from specchat.ui.screens.history import HistoryScreen
    from specchat.ui.widgets.reply import NoteView, UserView

    async def run():
        app = SpecchatApp(loader=replay_loader(crafted, "max"), deterministic=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.turns_ended >= 1, what="the replay")
            await pilot.pause(0.1)
            screens = [app.export_screenshot()]
            texts = [app.sub_title, app.chat.query_one("#status-text").render().plain]
            texts += [str(reply.text) for reply in app.chat.transcript.replies]
            texts += [str(t.alternatives) for r in app.chat.transcript.replies for t in r.tokens]
            notes = [str(view.render()) for view in app.chat.query(NoteView)] + [
                str(view.render()) for view in app.chat.query(UserView)]
            texts += notes
            app.push_screen(HistoryScreen())
            await wait_for(pilot, lambda: app.screen.sessions, what="the history")
            await pilot.pause(0.1)
            screens.append(app.export_screenshot())
            texts += [n.message for n in app._notifications]
            return screens, texts

    screens, texts = asyncio.run(run())
    for text in texts:
        assert_inert(text, where="widget")
    for svg in screens:
        assert_inert(svg, where="screen")
    assert shown("profile") in texts[0]
    assert any(shown("reply") == text for text in texts)  # the recorded reply, kept
    assert any("replay stopped" in text and "<key:>" in text for text in texts)
    for tag in ("user", "user2", "switched", "error"):
        assert any(shown(tag) in text for text in texts), tag


def test_run_output_is_inert_on_a_terminal_a_pipe_and_in_json(capsys, monkeypatch):
    """A model can emit any byte: `specchat run` prints its tokens made inert."""
    from types import SimpleNamespace

    from specchat.commands.run import stream_reply
    from specchat.events import ErrorEvent, Notice, Step, StepEvent, StepStats, Token, TurnFinished, UserMessage

    class Chat:
        def send(self, text):
            yield UserMessage(1, text)
            for i, kind in enumerate(("accepted", "resampled", "bonus", "target")):
                yield StepEvent(1, Step((Token(i, kind, text=evil(kind)),), StepStats(0, 0, 0)), 0.1)
            yield Notice(evil("notice"))
            yield ErrorEvent(evil("error"), 1)
            yield TurnFinished(1, evil("finish"), evil("text"), {}, 0.2)

        def take_notice(self):  # said after the turn (a store not saved, naming its path)
            return evil("late-notice")

    profile = SimpleNamespace(name=evil("profile"))
    for tty, as_json in ((False, False), (True, False), (False, True)):
        monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
        assert stream_reply(Chat(), "hi", profile, {"target": evil("model")}, as_json=as_json) == 1
        out, err = capsys.readouterr()
        assert_inert(out, colours=tty, escaped=as_json, where="stdout")
        assert_inert(err, where="stderr")
        if as_json:
            tokens = [json.loads(line) for line in out.splitlines()][:4]
            assert [t["text"] for t in tokens] == [evil(k) for k in ("accepted", "resampled", "bonus", "target")]
        else:
            assert all(shown(k) in _uncoloured(out) for k in ("accepted", "resampled", "bonus", "target"))
        assert err.count("\n") == 7 and shown("notice") in err and shown("error") in err  # summary: 4 lines
        assert shown("late-notice") in err


# --- malformed recordings: one line naming the file, the line and the field -----------

GOOD = [
    {"type": "UserMessage", "turn": 1, "text": "first prompt"},
    {"type": "TurnStarted", "turn": 1, "prompt_tokens": 3, "num_speculative_tokens": 3},
    {"type": "TurnFinished", "turn": 1, "finish_reason": "eos", "text": "first reply", "metrics": {}, "t": 0.1},
]


BAD_FIELDS = {
    # name: (the bad line, the reason in the message)
    "text-as-number": ({"type": "UserMessage", "turn": 2, "text": 5}, "field 'text' must be a string, not an integer (5)"),
    "turn-as-bool": ({"type": "UserMessage", "turn": True, "text": "x"}, "field 'turn' must be an integer"),
    "tokens-as-string": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                          "step": {"tokens": "abc", "stats": {"num_speculative_tokens": 0, "num_draft_tokens": 0,
                                                               "num_accepted_tokens": 0}}},
                         "field 'step.tokens' must be an array"),
    "token-text-as-number": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                              "step": {"tokens": [{"id": 1, "kind": "target", "text": 7}],
                                       "stats": {"num_speculative_tokens": 0, "num_draft_tokens": 0,
                                                 "num_accepted_tokens": 0}}},
                             "field 'step.tokens[0].text' must be a string"),
    "draft-count-huge": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                          "step": {"tokens": [], "stats": {"num_speculative_tokens": 10**9, "num_draft_tokens": 10**9,
                                                           "num_accepted_tokens": 0}}},
                         "draft counts must be between 0 and 16"),
    "tree-drafts-huge": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                          "step": {"tokens": [], "stats": {"num_speculative_tokens": 3, "num_draft_tokens": 10**6,
                                                           "num_accepted_tokens": 0}}},
                         "(128 drafts for a tree)"),
    "verified-positions-off": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                                "step": {"tokens": [], "stats": {"num_speculative_tokens": 3, "num_draft_tokens": 9,
                                                                 "num_accepted_tokens": 1, "verified_positions": 7}}},
                               "field 'step.stats.verified_positions' must be the accepted count or one more"),
    "recommended-gamma-text": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                                "step": {"tokens": [], "stats": {"num_speculative_tokens": 0, "num_draft_tokens": 0,
                                                                 "num_accepted_tokens": 0,
                                                                 "recommended_gamma": evil("gamma")}}},
                               "field 'step.stats.recommended_gamma' must be a γ between 0 and 16 or \"auto\""),
    "predicted-nan": ({"type": "StepEvent", "turn": 2, "t": 0.1,
                       "step": {"tokens": [], "stats": {"num_speculative_tokens": 0, "num_draft_tokens": 0,
                                                        "num_accepted_tokens": 0, "predicted_cost": float("nan")}}},
                      "field 'step.stats.predicted_cost' must be a finite number above 0"),
    "verdict-text": ({"type": "TurnFinished", "turn": 2, "finish_reason": "eos", "text": "x", "t": 0.1,
                      "metrics": {"session": {"verdict": evil("verdict")}}},
                     "field 'metrics.session.verdict' must be \"pays\", \"does not pay\" or null"),
    "metrics-value": ({"type": "TurnFinished", "turn": 2, "finish_reason": "eos", "text": "x", "t": 0.1,
                       "metrics": {"turn": {"tokens_per_s": evil("metric")}}},
                      "field 'metrics.turn.tokens_per_s' must be"),
    "unknown-key": ({"type": "ChatReset", evil("key"): 1}, "ChatReset has an unknown field '<key:>'"),
    "unknown-type": ({"type": evil("type")}, "unknown event type '<type:>'"),
    "ts-infinite": ({"type": "ChatReset", "ts": float("inf")}, "field 'ts' must be a finite number of seconds"),
    "ts-backwards": ({"type": "ChatReset", "ts": 5.0}, "field 'ts' goes back in time"),
}


@pytest.fixture(params=sorted(BAD_FIELDS))
def malformed(request, tmp_path) -> tuple[Path, str]:
    bad, reason = BAD_FIELDS[request.param]
    lines = [json.dumps({**e, "ts": 1000.0 + i}) for i, e in enumerate([header(), *GOOD])]
    lines.append(json.dumps({"ts": 1010.0, **bad}))
    lines.append(json.dumps({**GOOD[0], "turn": 3, "ts": 1011.0}))
    path = sessions_dir() / f"bad-{request.param}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_crafted(sessions_dir() / "whole.jsonl")
    return path, reason


def test_a_bad_field_stops_the_reader_at_that_line_naming_it(malformed):
    path, reason = malformed
    recording = read_recording(path)
    assert [t.event.text for t in recording.events[:1]] == ["first prompt"] and len(recording.events) == 3
    assert recording.damage.line == 5 and reason in recording.damage.reason
    assert resume_from(path).history[1] == {"role": "assistant", "content": "first reply"}


def test_a_bad_field_is_one_line_on_every_command(malformed, capsys, tmp_path):
    path, reason = malformed
    code, out, err = run_cli(capsys, "replay", str(path), "--headless", "--speed", "max")
    assert code == 1 and "you › first prompt" in out and "[turn 1: eos" in out
    (line,) = err.splitlines()
    assert f"{path}, line 5" in line and reason in line
    code, out, err = run_cli(capsys, "export", str(path), "-o", str(tmp_path / "x.md"))
    assert code == 0 and reason in err and "first reply" in (tmp_path / "x.md").read_text()
    code, out, err = run_cli(capsys, "replay", "--list")
    assert code == 0 and len(out.splitlines()) == 2 and reason in out  # the others still listed
    for text in (out, err):
        assert "Traceback" not in text
        assert_inert(text)


# --- lines nested past what the decoder, or a check quoting a value, can recurse through ---

DEEP_STEP = ('{"type": "StepEvent", "turn": 2, "t": 0.1, "step": {"tokens": %s, "stats": '
             '{"num_speculative_tokens": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}}}')


@pytest.mark.parametrize("line", [1, 2])
def test_a_line_nested_too_deeply_is_one_line_of_damage_at_that_line(tmp_path, line):
    """Every depth across the recursion limit (so whatever the stack above this test): a
    value too deep to decode, or one that decodes but is too deep for a check to quote,
    is a bad line like any other — never a RecursionError."""
    path = tmp_path / "deep.jsonl"
    good = [json.dumps({**e, "ts": 1000.0 + i}) for i, e in enumerate([header(), *GOOD])]
    for depth in [*range(sys.getrecursionlimit() - 150, sys.getrecursionlimit() + 50, 3), 100_000]:
        for deep in ("[" * depth + "]" * depth, DEEP_STEP % ("[" * depth + "]" * depth)):
            path.write_text("\n".join([*good[:line - 1], deep, *good[line - 1:]]) + "\n", encoding="utf-8")
            if line == 1:
                with pytest.raises(RecordingError, match="not a specchat recording: line 1 is") as info:
                    read_recording(path)
                assert len(str(info.value).splitlines()) == 1
                continue
            recording = read_recording(path)
            assert recording.damage.line == 2 and len(recording.damage.reason.splitlines()) == 1
            assert resume_from(path).history == []  # --resume: nothing whole before the damage
    assert "not valid JSON (nested too deeply)" in (str(info.value) if line == 1 else recording.damage.reason)


def test_a_free_field_nested_deep_is_damage_before_anything_recurses_on_it(tmp_path):
    """A TurnFinished's metrics take any keys: a value nested 600 deep decodes and passed the
    checks, then crashed the TUI's sanitiser (and a reopened chat's recorder) with RecursionError."""
    events = crafted_events()
    events[3] = {**events[3], "metrics": {"extra": json.loads("[" * 600 + "]" * 600)}}
    recording = read_recording(write_crafted(tmp_path / "deep.jsonl", events))
    assert recording.damage.line == 5 and "nested more than 32 levels deep" in recording.damage.reason
