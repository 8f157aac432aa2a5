"""Copy a code block or an earlier reply, and search the chat and the sessions (issue 59,
newcomer item 11): the pure parts in tables, then each through a real app under Pilot."""

from __future__ import annotations

import asyncio

from specchat.events import Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted, UserMessage
from specchat.ui.copying import CodeBlock, code_blocks, copy_choices
from specchat.ui.screens.copy import CopyScreen
from tests.support.pilot import replayed
from tests.support.ui_session import write_recording

FIRST = "Use a loop:\n\n```python\nfor i in range(3):\n    print(i)\n```\n\nor a comprehension."
SECOND = "Two ways:\n\n```sh\nls -l\n```\n\nand\n\n~~~\nplain fence\n~~~\n"


def turn(number: int, prompt: str, reply: str) -> list:
    """One recorded turn whose reply is ``reply``, a word a plain step."""
    words = reply.split(" ")
    pieces = [w + " " for w in words[:-1]] + [words[-1]]
    steps = [StepEvent(number, Step((Token(id=i, kind="target", p=0.5, text=piece),),
                                    StepStats(0, 0, 0, verify_ms=10.0, total_ms=10.0)), 0.01 * i)
             for i, piece in enumerate(pieces)]
    return [UserMessage(number, prompt), TurnStarted(number, 8, 0), *steps,
            TurnFinished(number, "eos", reply, {}, 0.5)]


def two_replies(tmp_path):
    """A recorded chat of two turns, each reply with code in it."""
    return write_recording(tmp_path / "chat.jsonl", [turn(1, "loop?", FIRST) + turn(2, "shell?", SECOND)])


def test_code_blocks_of_a_reply():
    assert code_blocks(FIRST) == [CodeBlock("python", "for i in range(3):\n    print(i)")]
    assert code_blocks(SECOND) == [CodeBlock("sh", "ls -l"), CodeBlock("", "plain fence")]
    assert code_blocks("no code here") == []
    # a reply cut short inside its block: the block runs to the end
    assert code_blocks("see:\n```js\nlet x = 1;\n") == [CodeBlock("js", "let x = 1;")]
    # a longer fence holds a shorter one
    assert code_blocks("````md\n```\ninner\n```\n````") == [CodeBlock("md", "```\ninner\n```")]


def test_copy_choices_put_the_last_reply_first_then_its_blocks_then_earlier_replies():
    choices = copy_choices([FIRST, SECOND])
    assert [c.what for c in choices] == ["reply 2", "code block 1 of reply 2", "code block 2 of reply 2",
                                         "reply 1", "code block 1 of reply 1"]
    assert choices[0].text == SECOND and choices[0].label.startswith("reply 2 (last) · ")
    assert choices[4].text == "for i in range(3):\n    print(i)" and "python · 2 lines · for i in range(3):" in choices[4].label
    assert all("\n" not in c.label for c in choices)


def test_ctrl_o_copies_the_last_reply_an_earlier_one_or_a_code_block(tmp_path):
    async def run():
        async with replayed(two_replies(tmp_path)) as (app, pilot):
            await pilot.pause(0.1)
            await pilot.press("ctrl+o")
            assert isinstance(app.screen, CopyScreen)
            await pilot.press("enter")  # Ctrl+O, Enter: the last reply, as Ctrl+O alone did
            assert app.clipboard == SECOND and not isinstance(app.screen, CopyScreen)
            await pilot.press("ctrl+o")
            await pilot.press("down", "down", "down", "down", "enter")  # reply 1's code block
            assert app.clipboard == "for i in range(3):\n    print(i)"
            await pilot.press("ctrl+o", "down", "down", "down", "enter")  # reply 1 itself
            assert app.clipboard == FIRST
            await pilot.press("ctrl+o", "escape")
            assert app.clipboard == FIRST and not isinstance(app.screen, CopyScreen)
            messages = [n.message for n in app._notifications]
            assert "copied code block 1 of reply 1 (31 characters)" in messages

    asyncio.run(run())


def test_search_finds_case_insensitively_and_shows_a_clean_snippet():
    from specchat.ui.searching import Searchable, search, snippet

    items = [Searchable("a", "you · this chat", "How do I Loop in Python?"),
             Searchable("b", "reply 1 · this chat", "x" * 100 + " a loop\x1b]52;c;UFdORUQ=\x07 here\n" + "y" * 100)]
    hits = search("LOOP", items)
    assert [h.target for h in hits] == ["a", "b"]
    assert hits[0].snippet == "How do I Loop in Python?"
    assert "\x1b" not in hits[1].snippet and "\x07" not in hits[1].snippet and "\n" not in hits[1].snippet
    assert hits[1].snippet.startswith("…") and hits[1].snippet.endswith("…") and "a loop" in hits[1].snippet
    assert search("   ", items) == [] and search("absent", items) == []
    assert len(snippet("z" * 1000, 500, 4)) <= 72


def test_ctrl_f_goes_to_a_place_in_the_chat_or_replays_a_session_beside_it(tmp_path):
    from specchat.sessions.fileformat import sessions_dir
    from specchat.ui.screens.replay import ReplayScreen
    from specchat.ui.screens.search import SearchScreen
    from specchat.ui.widgets.reply import ReplyView
    from tests.support.pilot import wait_for

    directory = sessions_dir()
    directory.mkdir(parents=True, exist_ok=True)
    old = write_recording(directory / "old.jsonl", [turn(1, "what is a zeppelin?", "An airship.")])
    async def run():
        async with replayed(two_replies(tmp_path)) as (app, pilot):
            await pilot.pause(0.1)
            await pilot.press("ctrl+f")
            assert isinstance(app.screen, SearchScreen)
            await pilot.press(*"COMPREHENSION")
            await pilot.pause(0.1)
            assert [h.where for h in app.screen.hits] == ["reply 1 · this chat"]
            await pilot.press("enter")
            first = app.chat.transcript.replies[0]
            assert not isinstance(app.screen, SearchScreen) and first.has_class("-found")
            assert isinstance(first, ReplyView)

            await pilot.press("ctrl+f", *"zeppelin")
            screen = app.screen
            await wait_for(pilot, lambda: screen.sessions is not None and screen.hits, what="the sessions read")
            assert [h.target for h in screen.hits] == [old]  # its message, in a recording of another chat
            await pilot.press("down", "enter")
            assert isinstance(app.screen, ReplayScreen) and app.screen.path == old

    asyncio.run(run())
