"""A chat that outgrows the context (engine/session.py, ``[chat] overflow``), on the tiny
model (a 512-token context) with 100-token replies: twelve turns.

* ``"rolling"`` (the default): every turn replies in full; the prompt the model sees
  always starts with the system prompt and ends with the new message, and leaves room for
  the reply; once turns are left out, TurnStarted's note says how many; the history (what
  the transcript and the recording hold) keeps every turn. Planted bug: a template that
  leaves the system prompt out (the one place that adds it) fails it.
* The window itself (``ChatSession._window``, on a stand-in template of ten tokens a
  message), in a table: which messages the prompt holds — whole turns, each user message
  with its reply — and the room kept for the reply, capped at half the context when
  max_new_tokens nears it. Planted bugs: a window that drops the earliest kept turn's user
  message (``+ 1``), and one without the half-context cap — each caught.
* ``"stop"``: today's behaviour, the reply ends for want of room ("context").
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specchat.engine.session import ChatSession
from specchat.engine.template import ChatTemplate
from specchat.events import TurnFinished, TurnStarted
from tests.support.mutations import mutant, patched

SYSTEM = "You are a terse assistant."
MESSAGE = "Tell me more about the history of the city and its rivers, bridges and old markets."
TURNS, REPLY = 12, 100


def twelve_turns(profile_path, overflow: str):
    from specchat.config import load_profile
    from specchat.engine.factory import build_chat
    from specchat.loading import load_models

    profile = load_profile(str(profile_path)).replace(
        sampling={"max_new_tokens": REPLY, "temperature": 0.0}, chat={"system_prompt": SYSTEM, "overflow": overflow})
    chat = build_chat(profile, load_models(profile))
    seen, generate = [], chat.engine.generate

    def spy(ids, *args, **kwargs):
        seen.append(list(ids))
        return generate(ids, *args, **kwargs)

    chat.engine.generate = spy
    events = [e for turn in range(TURNS) for e in chat.send(f"{turn}: {MESSAGE}")]
    return chat, seen, events


def test_rolling_keeps_the_system_prompt_and_the_latest_turns(tiny_ngram_profile_path):
    chat, seen, events = twelve_turns(tiny_ngram_profile_path, "rolling")
    finished = [e for e in events if isinstance(e, TurnFinished)]
    notes = [e.note for e in events if isinstance(e, TurnStarted)]
    system = list(chat.tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM}], tokenize=True))
    room = chat.engine.target.max_length - REPLY
    assert [f.finish_reason for f in finished] == ["length"] * TURNS
    assert all(ids[:len(system)] == system and len(ids) <= room for ids in seen)
    assert "no longer sees the first" in notes[-1] and not notes[0]
    assert next(n for n in notes if n).startswith("the model no longer sees the first turn of this chat, to leave "
                                                  "room for the reply (it stays in")
    assert len(chat.history) == 2 * TURNS  # the transcript keeps everything
    # a message too long even with every earlier turn out: said as the message's fault, once
    events = list(chat.send(MESSAGE * 25))
    (note,) = [e.note for e in events if isinstance(e, TurnStarted)]
    context = chat.engine.target.max_length
    assert note.startswith("this message and the system prompt are ") and "shorten it" in note, note
    assert f"of the model's {context:,}-token context" in note and "no longer sees" not in note


def test_planted_a_prompt_without_the_system_prompt_is_caught(tiny_ngram_profile_path):
    bug = mutant(ChatTemplate.prompt_ids, [("messages = with_system(self.system_prompt, messages)", "pass")])
    with patched(ChatTemplate, "prompt_ids", bug), pytest.raises(AssertionError):
        test_rolling_keeps_the_system_prompt_and_the_latest_turns(tiny_ngram_profile_path)


CHAT = [{"role": role, "content": f"{role[0]}{turn}"} for turn in range(3) for role in ("user", "assistant")] + [
    {"role": "user", "content": "new"}]


def kept(max_new_tokens: int, context: int) -> tuple[list[str], int]:
    """(the contents of the messages the windowed prompt holds, turns left out), for a
    template of ten tokens a message."""
    def prompt_ids(these):
        seen.append(these)
        return [0] * (10 * len(these))

    seen = []
    session = SimpleNamespace(prompt_ids=prompt_ids, max_new_tokens=max_new_tokens,
                              engine=SimpleNamespace(target=SimpleNamespace(max_length=context)))
    ids, dropped = ChatSession._window(session, CHAT, prompt_ids(CHAT))
    assert len(ids) == 10 * len(seen[-1])
    return [m["content"] for m in seen[-1]], dropped


WINDOWS = [  # (max_new_tokens, context, the messages kept, turns left out)
    (30, 100, ["u0", "a0", "u1", "a1", "u2", "a2", "new"], 0),  # 70 + 30 fits
    (40, 100, ["u1", "a1", "u2", "a2", "new"], 1),  # the earliest turn goes, question and reply
    (44, 90, ["u2", "a2", "new"], 2),
    (24, 50, ["new"], 3),  # every earlier turn out, the message stays (the template adds the system prompt)
    (1000, 100, ["u1", "a1", "u2", "a2", "new"], 1),  # max_new_tokens past the context: half of it is kept
    (60, 120, ["u1", "a1", "u2", "a2", "new"], 1),  # exactly half
]


@pytest.mark.parametrize("max_new_tokens, context, want, dropped", WINDOWS)
def test_the_window_keeps_whole_latest_turns_and_half_the_context_at_most(max_new_tokens, context, want, dropped):
    assert kept(max_new_tokens, context) == (want, dropped)


@pytest.mark.parametrize("edit", [
    ("messages[turns[dropped] if", "messages[turns[dropped] + 1 if"),  # the kept turn's question lost
    ("min(self.max_new_tokens, self.engine.target.max_length // 2)", "self.max_new_tokens"),  # no cap
])
def test_planted_window_bugs_are_caught(edit):
    bug = mutant(ChatSession._window, [edit])
    with patched(ChatSession, "_window", bug), pytest.raises(AssertionError):
        for case in WINDOWS:
            test_the_window_keeps_whole_latest_turns_and_half_the_context_at_most(*case)


def test_stop_ends_the_reply_for_want_of_room(tiny_ngram_profile_path):
    chat, seen, events = twelve_turns(tiny_ngram_profile_path, "stop")
    finished = [e.finish_reason for e in events if isinstance(e, TurnFinished)]
    assert finished[0] == "length" and "context" in finished
    assert not any("no longer sees" in e.note for e in events if isinstance(e, TurnStarted))


def test_an_unknown_overflow_is_one_line(tmp_path):
    from specchat.config import load_profile
    from specchat.errors import ProfileError

    path = tmp_path / "bad.toml"
    path.write_text('extends = "default"\n[chat]\noverflow = "truncate"\n')
    with pytest.raises(ProfileError) as error:
        load_profile(str(path))
    assert "\n" not in str(error.value) and "overflow" in str(error.value) and "rolling" in str(error.value)
