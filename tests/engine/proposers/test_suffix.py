"""Suffix decoding (engine/proposers/suffix.py) against a brute-force walk of every earlier
occurrence, on random contexts that grow and are rewound; and its adaptive length.
Its exactness is the engine's: tests/engine/test_exactness.py runs it in the χ² grid."""

from __future__ import annotations

import random

import pytest

from specchat.engine.proposers.ngram_index import MAX_OCCURRENCES
from specchat.engine.proposers.suffix import SuffixProposer


def walk(ids: list[int], k: int, lo: int, hi: int, min_score: float) -> list[int]:
    """The draft, by scanning the whole context: the longest suffix of lo..hi tokens that
    occurred before; then, over its occurrences (the latest MAX_OCCURRENCES), the token most
    of those still agreeing went on with (a tie: the latest), while the product of those
    shares stays ≥ min_score."""
    end = len(ids) - 1
    for n in range(min(hi, end), lo - 1, -1):
        occurrences = [j for j in range(n - 1, end) if ids[j - n + 1:j + 1] == ids[end - n + 1:]][-MAX_OCCURRENCES:]
        if not occurrences:
            continue
        cursors, draft, score = [j + 1 for j in reversed(occurrences)], [], 1.0
        while len(draft) < k and cursors:
            nexts = [ids[c] for c in cursors]
            best = max(nexts.count(t) for t in nexts)
            token = next(t for t in nexts if nexts.count(t) == best)
            score *= best / len(cursors)
            if score < min_score:
                break
            draft.append(token)
            cursors = [c + 1 for c in cursors if ids[c] == token and c + 1 <= end]
        return draft
    return []


@pytest.mark.parametrize("seed", range(4))
def test_drafts_what_a_full_scan_walks_while_the_context_grows_and_is_rewound(seed):
    rng = random.Random(seed)
    proposer = SuffixProposer(6, 1, 3)
    ids: list[int] = []
    for step in range(300):
        if step % 50 == 49:  # a new turn that edits the conversation: the index follows back
            del ids[rng.randrange(len(ids)):]
        ids.append(rng.randrange(4))
        proposer.observe(0)  # a step ends: the lookup is looked up afresh
        got, _ = proposer.lookup(ids, 6)
        assert got == walk(ids, 6, 1, 3, proposer.min_score), (seed, step)


def test_a_unanimous_continuation_drafts_deep_and_a_split_stops_it():
    proposer = SuffixProposer(8, 1, 3)
    quote = [10, 11, 12, 13, 14, 15, 16]
    ids = quote + [1] + quote + [2] + [10, 11]
    draft, match = proposer.lookup(ids, 8)
    assert draft[:5] == [12, 13, 14, 15, 16] and proposer.shares[:5] == [1.0] * 5
    assert proposer.shares[5] == 0.5  # after the quote the two occurrences went different ways
    assert match.agreeing == 1 and match.rival == 0
    proposer.observe(0)
    strict = SuffixProposer(8, 1, 3, min_score=0.6)
    assert strict.lookup(ids, 8)[0] == [12, 13, 14, 15, 16]  # the split is where it stops
