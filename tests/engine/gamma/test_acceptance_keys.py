"""The acceptance keys' buckets and priors (engine/gamma/acceptance.py), pinned in tables:
a share's bucket at and around each lower end, what each bucket stands for, the split
shape a suffix draft's shares give, and the per-position prior that shape starts from.
Planted bugs: a share at a lower end put in the bucket below (``>=`` → ``>``), and a
share below the first end given the first bucket — each caught.
"""

from __future__ import annotations

import pytest

from specchat.engine.gamma import acceptance
from specchat.engine.gamma.acceptance import key_prior, match_prior, share_value, split_shape
from tests.support.mutations import mutant, patched

BUCKETS = [(0.0, 0.0), (0.1, 0.0), (0.2499, 0.0), (0.25, 0.25), (0.3, 0.25), (0.5, 0.5), (0.7499, 0.5),
           (0.75, 0.75), (0.99, 0.75), (1.0, 1.0)]


@pytest.mark.parametrize("share, bucket", BUCKETS)
def test_a_share_falls_in_the_bucket_of_its_lower_end(share, bucket):
    assert acceptance.share_bucket(share) == bucket  # read at call time: the planted bug swaps it


@pytest.mark.parametrize("bucket, value", [(0.0, 0.125), (0.25, 0.375), (0.5, 0.625), (0.75, 0.875), (1.0, 1.0)])
def test_a_bucket_stands_for_the_middle_of_its_range(bucket, value):
    assert share_value(bucket) == value


@pytest.mark.parametrize("shares, shape", [
    ((), ()),
    ((1.0,), ()),  # the first draft's share is the match's consensus: never in the shape
    ((0.3, 1.0, 1.0), ()),  # unanimous from the second draft on: no split
    ((1.0, 0.5), (0.5,)),
    ((1.0, 0.25, 1.0), (0.25,)),  # unanimous after the last split: left off
    ((1.0, 1.0, 0.8, 1.0, 0.1), (1.0, 0.75, 1.0, 0.0)),  # unanimous before a split: kept
])
def test_the_split_shape_of_a_suffix_drafts_shares(shares, shape):
    assert split_shape(shares) == shape


def test_a_suffix_keys_prior_per_draft_position():
    match = (4, "agreed")
    first = match_prior(match)
    assert key_prior(("suffix", match + ((0.5, 1.0, 0.0),))) == [first, first * 0.625, first, first * 0.125, first]
    assert key_prior(("suffix", match + ((),))) == [first, first]
    assert key_prior(("ngram", match)) == first and key_prior(("draft", ())) is None


@pytest.mark.parametrize("edit", [("if share >= low", "if share > low"), ("default=0.0", "default=0.25")])
def test_planted_share_bucket_bugs_are_caught(edit):
    bug = mutant(acceptance.share_bucket, [edit])
    with patched(acceptance, "share_bucket", bug), pytest.raises(AssertionError):
        for share, bucket in BUCKETS:
            test_a_share_falls_in_the_bucket_of_its_lower_end(share, bucket)
