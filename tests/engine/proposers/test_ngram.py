"""Prompt lookup's index (ngram.py) against a brute-force scan of the whole context, and
the occurrence it drafts from."""

import random
from collections import Counter

from specchat.engine.proposers.ngram_index import MATCH_CAP, MAX_OCCURRENCES, NgramIndex, NgramMatch


def scan(ids, k, min_n, max_n):
    """The earlier occurrences of the longest matching n-gram (the MAX_OCCURRENCES most
    recent), found by brute force; the one agreeing longest with the context (then the
    majority continuation, then the most recent) is drafted from."""
    end = len(ids) - 1
    for n in range(min(max_n, end), min_n - 1, -1):
        tail = ids[end - n + 1:]
        found = []
        for j in range(end - 1, n - 2, -1):
            if ids[j - n + 1:j + 1] == tail:
                agree = n
                while agree < MATCH_CAP and j >= agree and ids[j - agree] == ids[end - agree]:
                    agree += 1
                found.append((agree, j))
        found = found[:MAX_OCCURRENCES]
        if found:
            longest = max(agree for agree, _ in found)
            ties = [j for agree, j in found if agree == longest]
            votes = Counter(ids[j + 1] for j in ties)
            chosen = next(j for j in ties if votes[ids[j + 1]] == max(votes.values()))
            same = sum(ids[j + 1] == ids[chosen + 1] for _, j in found) - 1
            return ids[chosen + 1:chosen + 1 + k], NgramMatch(longest, same, len(found) - 1 - same)
    return [], None


def test_index_matches_a_full_scan_while_the_context_grows_and_is_rewound():
    """The context grows by a few tokens a step and is sometimes cut back and rewritten (a
    new turn, an edited message, rejected text): the index must forget every position it
    no longer holds, or it drafts from text that is gone."""
    rng = random.Random(7)
    for trial in range(40):
        index, ids = NgramIndex(), []
        vocab = rng.choice((3, 5, 8))
        min_n, max_n = rng.choice(((1, 3), (1, 1), (2, 3), (1, 2), (3, 5)))
        cut = rng.choice((0.1, 0.01))  # short contexts, or long ones (over MAX_OCCURRENCES of a token)
        for _ in range(120):
            if ids and rng.random() < cut:
                del ids[rng.randrange(len(ids)):]
            ids += [rng.randrange(vocab) for _ in range(rng.randint(1, 4))]
            k = rng.randint(1, 10)
            assert index.lookup(list(ids), k, min_n, max_n) == scan(ids, k, min_n, max_n), (trial, ids)


def test_drafts_from_the_occurrence_that_agrees_longest():
    # the 2-gram [1, 2] occurred twice: after 7 8 (as the context ends now) and after 9;
    # the most recent went on with 4, the one that agrees four tokens back with 3
    ids = [7, 8, 1, 2, 3, 9, 1, 2, 4, 7, 8, 1, 2]
    assert NgramIndex().lookup(ids, 2, 1, 2) == ([3, 9], NgramMatch(4, 0, 1))
    # with 3-grams, [8, 1, 2] occurred once
    assert NgramIndex().lookup(ids, 2, 1, 3) == ([3, 9], NgramMatch(4))


def test_reports_whether_the_other_occurrences_went_on_alike():
    assert NgramIndex().lookup([1, 2, 3, 1, 2, 3, 5, 1, 2], 1, 1, 3)[1].consensus == "agreed"
    assert NgramIndex().lookup([1, 2, 3, 1, 2, 4, 5, 1, 2], 1, 1, 3)[1].consensus == "split"
    assert NgramIndex().lookup([1, 2, 3, 5, 1, 2], 1, 1, 3)[1].consensus == "alone"
    assert NgramIndex().lookup([1, 2, 3, 5], 1, 1, 3) == ([], None)


def test_finds_a_long_match_behind_many_occurrences_of_its_last_tokens():
    """A 3-gram whose one earlier occurrence lies behind 70 more recent occurrences of its
    last two tokens is still found: the occurrences weighed are the n-gram's own."""
    ids = [5, 6, 7, 1, 2, 3] + [9, 1, 2, 4] * 70 + [5, 6, 7, 1, 2]
    assert NgramIndex().lookup(ids, 1, 1, 3) == ([3], NgramMatch(5))
    assert NgramIndex().lookup(ids, 1, 3, 3) == ([3], NgramMatch(5))


def test_ngrams_longer_than_the_agreement_cap():
    ids = list(range(20)) + [99] + list(range(20))
    assert NgramIndex().lookup(ids, 2, 17, 20) == ([99, 0], NgramMatch(20))
