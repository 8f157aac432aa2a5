"""The batched engine (engine/batch/batched.py) on the real embedded GGUF: what a finished
reply leaves for the next request, and where a stop or EOS token ends a reply.

Found by a mutation trial: no other test reads these, so each planted bug below passed
every batched test.

* A request that continues a finished reply (a chat's next turn: its prompt, the reply,
  then more) reuses the slot's cells. A finished sequence holds the cells of
  ids[:cached] only: its last emitted token was never run. Planted bug: the slot
  recorded as holding every id (``self._held[seq] = slot.ids``), so the next request
  skips running that token and attends over a context with a hole in it.
* A stop token or an EOS token ends the reply with it, as its last token, and the right
  finish reason. Planted bugs: stop_token_ids ignored (only EOS checked); the stop token
  cut off the reply (``tokens[:i]``).
* A reply never runs past its max_new_tokens, however many drafts are kept. Planted bug:
  a sequence's drafts capped at the tokens left rather than one fewer (the bonus token
  is one more), so a step whose drafts are all kept emits one token too many.
"""

from __future__ import annotations

import pytest

from specchat.engine import NgramProposer, SpeculativeEngine
from specchat.engine.batch.batched import BatchedEngine, Request
from tests.engine.batch.test_batched import GREEDY, backend, chats, near_tie_or_equal, run  # noqa: F401 (fixtures)
from tests.engine.batch.test_batched_exact import Scripted
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp


def solo(backend, ids: list[int], n: int) -> list[int]:
    return [t.id for s in SpeculativeEngine(backend, None).generate(ids, GREEDY, n) for t in s.tokens]


def test_a_continued_reply_reuses_only_the_cells_that_were_run(backend, chats):
    """Four replies, then four requests each continuing one (prompt + reply + the start of
    another question): every continued reply equals its one-sequence reply (or parts from
    it at a near-tie). With the finished reply's last token counted as cached, its cell is
    missing and the continuations differ (planted: ``self._held[seq] = slot.ids``)."""
    engine = BatchedEngine(backend, n_seq=4, proposer_factory=lambda lane: NgramProposer(3, 1, 3, 5))
    try:
        first = run(engine, [Request(ids, GREEDY, 10) for ids in chats])
        more = chats[1][-6:]  # a few ids of another turn: the continuation's new text
        follow = [chats[i] + first[i][0] + more for i in range(4)]
        assert all(len(first[i][1]) == 1 for i in range(4))  # each ended (length or EOS) on a token never run
        firsts = {}
        again = run(engine, [Request(ids, GREEDY, 12) for ids in follow], firsts=firsts)
    finally:
        engine.close()
    for i in range(4):  # one set-up (engine.admit) for a batch of one or many: a
        # batch's first step says what it reused, as one sequence's does (it said 0; planted: admit without ``first``)
        held = len(chats[i]) + len(first[i][0])  # the last token's cell too where it was a kept draft
        assert held - 1 <= firsts[i].reused_tokens <= held, (i, firsts[i].reused_tokens, held)
    for i, ids in enumerate(follow):
        want = solo(backend, ids, 12)
        assert near_tie_or_equal(backend, ids, again[i][0], want) is None, (i, again[i][0], want)


@pytest.mark.parametrize("how", ["stop", "eos"])
def test_a_stop_or_eos_token_ends_the_reply_with_it(backend, chats, how):
    """The reply ends at the first stop (or EOS) token, that token included, finish reason
    "stop" (or "eos"); n-gram drafts past it are cut."""
    ids = chats[2]  # "Repeat after me three times": n-gram drafts run past the stop token
    want = solo(backend, ids, 30)
    at = next(i for i in range(4, len(want)) if want[i] not in want[:i])
    token = want[at]
    kwargs = {"eos_token_ids": [token]} if how == "eos" else {}
    engine = BatchedEngine(backend, n_seq=2, proposer_factory=lambda lane: NgramProposer(3, 1, 3, 5), **kwargs)
    stops = (token,) if how == "stop" else ()
    try:
        got = run(engine, [Request(ids, GREEDY, 30, stop_token_ids=stops), Request(chats[3], GREEDY, 8)])
    finally:
        engine.close()
    tokens, finishes, _ = got[0]
    assert finishes == [how], finishes
    assert tokens[-1] == token and token not in tokens[:-1], (tokens, token)
    assert near_tie_or_equal(backend, ids, tokens, want[:at + 1]) is None, (tokens, want[:at + 1])


def test_a_reply_never_runs_past_its_token_budget(backend, chats):
    """Drafts that are always kept (the greedy continuation, 3 a step): a reply of budget n
    is the first n greedy tokens, finish "length", for every n from 1 to 5."""
    ids = chats[2]
    want = solo(backend, ids, 8)
    budgets = [1, 2, 3, 4, 5]
    queue = [Scripted(want, len(ids), 3) for _ in budgets]
    engine = BatchedEngine(backend, n_seq=len(budgets), proposer_factory=lambda lane: queue.pop())
    try:
        got = run(engine, [Request(ids, GREEDY, n) for n in budgets])
    finally:
        engine.close()
    assert sum(accepted for _, _, accepted in got.values()) > 0  # drafts were kept
    for i, n in enumerate(budgets):
        tokens, finishes, _ = got[i]
        assert finishes == ["length"] and tokens == want[:n], (n, tokens, want[:n])
