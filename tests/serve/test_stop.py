"""``stop`` strings in ``specchat serve`` (serve/reply.py): a reply ends before the first
stop string to appear, however the tokens that spell it fall into steps, and a stream
never hands out text that it must later take back.

Real tokenizer (the embedded GGUF's), real Steps. Planted bugs, each fails a test here:
no hold-back (a stream sends "lazy" before learning that "lazy dog" stops it), cutting
after the stop string instead of before it, and a partial match that never completes
("lazy cat") held back for good at the end.
"""

from __future__ import annotations

import pytest

from specchat.events import Step, StepStats, Token
from specchat.serve.openai import BadRequest, parse_job
from specchat.serve.reply import Reply
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp
TEXT = "The quick brown fox jumps over the lazy cat, then over the lazy dog. The end."


@pytest.fixture(scope="module")
def tokenizer():
    from specchat.engine.backends.llamacpp import LlamaCppBackend
    from specchat.loading.embedded import find_gguf
    from specchat.loading.gguf_tokenizer import GgufTokenizer

    return GgufTokenizer(LlamaCppBackend(find_gguf(), n_threads=1, max_ctx=512).llm)


def replay(tokenizer, stop: tuple[str, ...], per_step: int) -> tuple[Reply, list[str]]:
    """TEXT's tokens fed ``per_step`` to a Step (the last one finishing for length) until
    the reply stops: (the reply, the text each step handed out)."""
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    reply, sent = Reply(tokenizer, 0, stop), []
    for at in range(0, len(ids), per_step):
        chunk = ids[at:at + per_step]
        last = at + per_step >= len(ids)
        text, _ = reply.add(Step(tuple(Token(i, "target", 0.5) for i in chunk), StepStats(0, 0, 0),
                                 "length" if last else None))
        sent.append(text)
        if reply.stopped:
            break
    return reply, sent


@pytest.mark.parametrize("per_step", [1, 2, 3, 7])
def test_the_reply_ends_before_the_stop_string_and_nothing_is_taken_back(tokenizer, per_step):
    reply, sent = replay(tokenizer, ("lazy dog",), per_step)
    want = TEXT[:TEXT.index("lazy dog")]
    assert reply.stopped and reply.finish_reason == "stop"
    assert "".join(sent) == reply.text == want
    for i in range(1, len(sent) + 1):  # every prefix handed out stays a prefix of the reply
        assert want.startswith("".join(sent[:i]))


def test_the_first_of_several_stop_strings_wins_and_a_near_miss_is_text(tokenizer):
    reply, sent = replay(tokenizer, ("The end", "over the lazy d"), 1)
    assert "".join(sent) == TEXT[:TEXT.index("over the lazy d")]
    assert "lazy cat" in reply.text  # "lazy " began a stop string, "cat" ended that


def test_without_a_stop_string_appearing_the_whole_text_is_handed_out(tokenizer):
    reply, sent = replay(tokenizer, ("lazy cow", "The end. Fin"), 2)  # the text ends as one begins
    assert not reply.stopped and reply.finish_reason == "length"
    assert "".join(sent) == reply.text == TEXT


def test_stop_is_read_as_openai_defines_it():
    from specchat.engine.sampling import SamplingParams

    def stop_of(value):
        return parse_job("completion", {"prompt": "hi", "stop": value}, SamplingParams(), 16).stop
    assert stop_of(None) == stop_of("") == stop_of([]) == ()
    assert stop_of("\n\n") == ("\n\n",) and stop_of(["a", "b", "a"]) == ("a", "b")
    for bad in (3, [""], ["x"] * 17, [None], "y" * 513):
        with pytest.raises(BadRequest, match="'stop' must be"):
            stop_of(bad)
