"""The parts joined up: CLI flags, the app's session keys, one recording per conversation.

Real tiny models, the real Textual app under Pilot, the real CLI in a subprocess.
SPECCHAT_DATA_DIR is a fresh directory per test (conftest), so recordings start empty.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from specchat.events import ProfileSwitched, TurnFinished, UserMessage, to_json
from specchat.live import LiveLoader, load_backend, resume_loader
from specchat.paths import data_dir
from specchat.sanitize import clean
from specchat.sessions.fileformat import sessions_dir
from specchat.sessions.reader import read_recording
from specchat.sessions.resume import resume_from
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.history import HistoryScreen
from specchat.ui.screens.replay import ReplayScreen
from specchat.ui.widgets.reply import NoteView, ReplyView, UserView
from tests.support.cli import in_process, run_cli
from tests.support.pilot import SIZE, wait_for


def noop(_event) -> None:
    pass


def test_profile_switch_keeps_one_conversation_in_one_recording(tiny_profile_path, tiny_ngram_profile_path):
    loader = LiveLoader(record=True)
    first = loader(str(tiny_profile_path), noop)
    list(first.backend.send("remember the word lighthouse"))
    second = loader(str(tiny_ngram_profile_path), noop)
    first.close()  # the app closes the replaced backend once the new one is installed
    events = list(second.backend.send("which word?"))
    second.close()

    path = first.info.recording
    assert second.info.recording == path and list(sessions_dir().iterdir()) == [path]
    assert events[0] == UserMessage(turn=2, text="which word?")
    assert len(second.backend.history) == 4  # the new models got the conversation so far
    recording = read_recording(path)
    assert recording.damage is None and len(recording.later_headers) == 1
    kinds = [type(t.event).__name__ for t in recording.events]
    assert kinds.index("ProfileSwitched") < kinds.index("UserMessage", kinds.index("TurnFinished"))
    assert any(t.event == ProfileSwitched("tiny-ngram") for t in recording.events)
    assert resume_from(path).history == second.backend.history

    # After the chat was closed (a replay replaced it), a new profile starts a new file,
    # created at once with its header (exclusively: no other chat can take the name);
    # a session in which nothing happens leaves no file behind once closed.
    third = loader(str(tiny_ngram_profile_path), noop)
    assert third.info.recording != path and third.info.recording.exists()
    third.close()
    assert list(sessions_dir().iterdir()) == [path]
    fourth = loader(str(tiny_ngram_profile_path), noop)
    list(fourth.backend.send("hello"))
    fourth.close()
    assert len(list(sessions_dir().iterdir())) == 2


def _recording_with_unanswered_prompt(profile: Path) -> tuple[Path, list]:
    loaded = load_backend(str(profile), noop, record=True)
    list(loaded.backend.send("remember the word lighthouse"))
    history = list(loaded.backend.history)
    loaded.close()
    path = loaded.info.recording
    with open(path, "a", encoding="utf-8") as f:  # a crash right after the prompt was sent
        f.write(json.dumps({**to_json(UserMessage(turn=2, text="an unanswered prompt")), "ts": time.time()}) + "\n")
    return path, history


def test_history_key_reopens_a_session_with_its_pending_prompt_and_replays_one(tiny_profile_path):
    path, history = _recording_with_unanswered_prompt(tiny_profile_path)

    async def run():
        app = SpecchatApp(str(tiny_profile_path), loader=LiveLoader(record=False),
                          reopen=lambda p: resume_loader(p, record=True))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.loaded is not None and app.loading is None, what="the profile")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.sessions, what="the list")
            await pilot.press("o")
            await wait_for(pilot, lambda: app.loading is None and app.info.recording is not None, what="the reopen")
            # A reply cut off by a crash counts as damage: the file stays as it is and the
            # conversation goes on in a new one that names it.
            continued = app.info.recording
            assert continued != path and continued.parent == path.parent
            assert app.chat.input.text == "an unanswered prompt"  # nothing typed is lost
            assert app.loaded.backend.history == history
            # the transcript shows the conversation it carries on, then says so and why the file moved
            views = app.chat.transcript.children
            users = [str(v.render()) for v in views if isinstance(v, UserView)]
            assert users == ["remember the word lighthouse", "an unanswered prompt"]
            replies = [v for v in views if isinstance(v, ReplyView)]
            assert [r.text for r in replies] == [clean(history[1]["content"])]  # the cut turn's empty box went
            notes = [str(v.render()) for v in views if isinstance(v, NoteView)]
            assert "— reopened: 2 earlier turns above —" in notes
            # the chat shown before stays above a divider, apart from the reopened one
            assert notes.index("— a reopened chat, as recorded —") < notes.index("— reopened: 2 earlier turns above —")
            assert any(f"{path.name} was cut short: the recording ends in the middle of turn 2" in n and f"new recording, {continued.name}" in n for n in notes)
            before = app.turns_ended
            app.chat.input.focus()
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.turns_ended > before, what="the reply")

            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.sessions, what="the list")
            live = app.loaded
            await pilot.press("enter")  # a replay opens beside the chat (issue 59, newcomer item 5)
            await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and not app.screen.playing,
                           what="the replay to finish")
            assert app.screen.transcript.replies and app.loaded is live and live.can_send

    asyncio.run(run())
    (continued,) = set(sessions_dir().iterdir()) - {path}
    recording = read_recording(continued)
    assert recording.header.environment["resumed_from"] == str(path)
    # the new file carries the conversation it goes on with, so reopening it later finds every turn
    assert len([t for t in recording.events if isinstance(t.event, TurnFinished)]) == 2
    assert [t.event.text for t in recording.events if isinstance(t.event, UserMessage)] == [
        "remember the word lighthouse", "an unanswered prompt", "an unanswered prompt"]
    again = resume_from(continued)
    assert again.damage is None and again.history[:2] == history and len(again.history) == 4


def test_history_without_a_model_loader_only_replays(tiny_profile_path):
    path, _ = _recording_with_unanswered_prompt(tiny_profile_path)

    async def run():
        from specchat.ui.backend import replay_loader

        app = SpecchatApp(None, loader=replay_loader(path, "max"))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.loaded is not None and not app.generating, what="the replay")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.sessions, what="the list")
            await pilot.press("o")
            await pilot.pause(0.2)
            messages = [n.message for n in app._notifications]
            assert any("reopening a session needs a live model" in m for m in messages), messages

    asyncio.run(run())


def test_screenshot_key_saves_an_svg_in_the_data_dir(tiny_profile_path):
    async def run():
        app = SpecchatApp(str(tiny_profile_path), loader=LiveLoader(record=False))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.loaded is not None, what="the profile")
            await pilot.press("ctrl+s")
            await pilot.pause(0.2)
            return [n.message for n in app._notifications]

    messages = asyncio.run(run())
    (svg,) = (data_dir() / "screenshots").glob("*.svg")
    assert svg.read_text(encoding="utf-8").lstrip().startswith("<svg")
    assert svg.stat().st_mode & 0o777 == 0o600 and svg.parent.stat().st_mode & 0o777 == 0o700  # it shows the chat
    assert any(str(svg) in m for m in messages), messages


def test_run_records_unless_no_record(tiny_profile_path):
    args = ("run", "--profile", str(tiny_profile_path), "--prompt", "hello", "--max-new-tokens", "4")
    # main in this process: what run records, not the interpreter (two fresh ones cost ~10 s)
    quiet = in_process(*args, "--no-record")
    assert quiet.returncode == 0, quiet.stderr
    assert not sessions_dir().exists() or not list(sessions_dir().iterdir())

    recorded = in_process(*args)
    assert recorded.returncode == 0, recorded.stderr
    (path,) = sessions_dir().iterdir()
    assert f"recorded to {path}" in recorded.stderr
    assert [h["content"] for h in resume_from(path).history][0] == "hello"


def test_bad_resume_file_is_one_line_before_any_model_loads(tmp_path):
    missing = run_cli("--resume", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().count("\n") == 0 and "no such recording" in missing.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    bad = run_cli("--resume", str(junk), "--no-record")
    assert bad.returncode == 2 and "not a specchat recording" in bad.stderr and "Traceback" not in bad.stderr


def test_a_cut_file_reopened_and_left_at_once_leaves_no_new_file(tiny_profile_path):
    """The new recording gets the carried conversation with its first message, not at once:
    opening a cut file to look at it, again and again, leaves no copies behind."""
    path, _ = _recording_with_unanswered_prompt(tiny_profile_path)
    before = set(sessions_dir().iterdir())
    loaded = resume_loader(path, record=True)(None, noop)
    assert loaded.info.recording != path
    loaded.close()
    assert set(sessions_dir().iterdir()) == before


def test_a_profile_switch_before_the_first_message_keeps_the_carried_conversation(tiny_profile_path):
    path, history = _recording_with_unanswered_prompt(tiny_profile_path)
    load = resume_loader(path, record=True)
    first = load(None, noop)
    second = load(str(tiny_profile_path), noop)  # Ctrl+P before anything was sent
    list(second.backend.send("and now?"))
    first.close()
    second.close()
    again = resume_from(second.info.recording)
    assert again.damage is None and again.history[:2] == history and len(again.history) == 4
