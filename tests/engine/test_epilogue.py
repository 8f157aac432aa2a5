"""The end of a step, per sequence (engine/epilogue.py): where a stop or EOS token cuts
the tokens, which finish reason a reply gets, and that one sequence (engine.py) and a
batch of them (batched.py) both end their steps there — a bug planted in the shared
epilogue fails the tests of both."""

from __future__ import annotations

import pytest

import specchat.engine.epilogue as epilogue
from specchat.events import Token
from tests.engine.batch.test_batched import backend, chats  # noqa: F401 (fixtures: the embedded GGUF, four chats)
from tests.support.mutations import mutant, patched
from tests.support.needs import needs_llama_cpp


def tokens(*ids: int) -> list[Token]:
    return [Token(id=i, kind="accepted") for i in ids]


# (tokens, produced before, ids before, stops, eos, budget, room) → (kept ids, finish)
CASES = [
    ((5, 6, 7), 0, 3, {6}, set(), 100, 100, [5, 6], "stop"),
    ((5, 6, 7), 0, 3, set(), {5}, 100, 100, [5], "eos"),
    ((5, 6, 7), 0, 3, {6}, {6}, 100, 100, [5, 6], "eos"),  # a token that is both: EOS
    ((5, 6, 7), 0, 3, set(), set(), 100, 100, [5, 6, 7], None),
    ((5, 6, 7), 7, 3, set(), set(), 10, 100, [5, 6, 7], "length"),
    ((5, 6, 7), 0, 3, set(), set(), 100, 6, [5, 6, 7], "context"),
    ((5, 6, 7), 7, 3, set(), set(), 10, 6, [5, 6, 7], "length"),  # the budget is read first
    ((5, 6, 7), 7, 3, {7}, set(), 10, 6, [5, 6, 7], "stop"),  # a stop token first of all
]


@pytest.mark.parametrize("emitted, produced, before, stops, eos, budget, room, kept, finish", CASES)
def test_settle_cuts_after_the_first_stop_and_names_the_finish(emitted, produced, before, stops, eos, budget, room,
                                                               kept, finish):
    ids = list(range(100, 100 + before))
    settled = epilogue.settle(ids, tokens(*emitted), produced, stops=stops, eos=eos, max_new_tokens=budget,
                              max_length=room)
    assert [t.id for t in settled.tokens] == kept and settled.finish == finish
    assert ids == list(range(100, 100 + before)) + kept


def cut_one_token_late():
    return patched(epilogue, "settle", mutant(epilogue.settle, [("tokens = tokens[: i + 1]",
                                                                 "tokens = tokens[: i + 2]")]))


def test_a_stop_cut_one_token_late_fails_one_sequence(target, draft):
    from tests.engine.test_engine import test_stop_token_ids_and_budget

    test_stop_token_ids_and_budget(target, draft)  # healthy: passes
    with cut_one_token_late(), pytest.raises(AssertionError):
        test_stop_token_ids_and_budget(target, draft)


@needs_llama_cpp
def test_a_stop_cut_one_token_late_fails_several_sequences(backend, chats):
    from tests.engine.batch.test_batched_reuse_and_stops import (
        test_a_stop_or_eos_token_ends_the_reply_with_it as stops_test)

    stops_test(backend, chats, "stop")  # healthy: passes
    with cut_one_token_late(), pytest.raises(AssertionError):
        stops_test(backend, chats, "stop")

