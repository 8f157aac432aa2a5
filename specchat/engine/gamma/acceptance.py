"""What a draft's acceptance estimates are keyed on (drafts that came alike share them: a
model's by source, a lookup's by its match, suffix decoding's also by where its occurrences
split), and the prior each key starts from, which the reply's own verdicts soon outweigh.
"""

from __future__ import annotations

from specchat.engine.gamma.cost_model import Prior
from specchat.engine.proposers import Candidate
from specchat.engine.proposers.ngram_index import NgramMatch

MATCH_BUCKETS = (1, 2, 3, 4, 5, 8, 16)  # lower ends: 1, 2, 3, 4, 5–7, 8–15, 16+
SHARE_BUCKETS = (0.25, 0.5, 0.75, 1.0)  # lower ends of a suffix draft's share's buckets (1.0: all went on)
# (agreement bucket, consensus), and for suffix decoding the share buckets of drafts 2, 3, …
# up to the last that was not unanimous; () for a model's drafts
MatchKey = tuple[int, str] | tuple[int, str, tuple[float, ...]]
AcceptanceKey = tuple[str, MatchKey | tuple[()]]  # (source, match key)


def length_bucket(length: int) -> int:
    """The lower end of an agreement length's bucket (0 for none)."""
    return max((low for low in MATCH_BUCKETS if length >= low), default=0)


def match_key(match: NgramMatch) -> MatchKey:
    """The acceptance estimates an n-gram match shares: its agreement bucket and whether
    the n-gram's other occurrences went on alike (ngram_index.py)."""
    return length_bucket(match.length), match.consensus


def match_prior(key: MatchKey) -> float:
    """Prior probability that a draft is kept after a match: by agreement length L,
    1 − 0.8 / L^0.8 — 0.20 at 1, 0.54 at 2, 0.74 at 4, 0.85 at 8, 0.91 at 16 — for a lone
    occurrence; a third of the way from there to certainty where every other occurrence went
    on alike, half of it where they went different ways. Fitted loosely to the first-draft
    acceptance on our prompt sets (ngram_index.py), as a starting point that a few of the reply's
    own verdicts outweigh."""
    length, consensus = key
    alone = 1.0 - 0.8 / length ** 0.8
    if consensus == "agreed":
        return 1.0 - (1.0 - alone) * 0.35
    if consensus == "split":
        return alone * 0.5
    return alone


def share_bucket(share: float) -> float:
    """The lower end of a draft's share's bucket (0.0 below the first)."""
    return max((low for low in SHARE_BUCKETS if share >= low), default=0.0)


def share_value(bucket: float) -> float:
    """What a share bucket stands for: the middle of its range (1.0 for unanimous)."""
    ends = (0.0, *SHARE_BUCKETS)
    i = ends.index(bucket)
    return 1.0 if bucket == 1.0 else (ends[i] + ends[i + 1]) / 2


def split_shape(shares: tuple[float, ...]) -> tuple[float, ...]:
    """The share buckets of drafts 2, 3, … (the first draft's share is the match's
    consensus already) up to the last that was not unanimous: a quote every occurrence
    agrees on is () however long, so quotes of every length share their estimates."""
    buckets = [share_bucket(share) for share in shares[1:]]
    while buckets and buckets[-1] == 1.0:
        buckets.pop()
    return tuple(buckets)


def acceptance_key(candidate: Candidate) -> AcceptanceKey:
    """The estimates a candidate's drafts share: its source's, a lookup's match's, and for
    suffix decoding where the occurrences behind its drafts split (:func:`split_shape`)."""
    if candidate.match is None:
        return candidate.source, ()
    key = match_key(candidate.match)
    return candidate.source, (key + (split_shape(candidate.shares),) if candidate.shares else key)


def key_prior(key: AcceptanceKey) -> Prior:
    """A key's starting acceptance: its match's prior; None (the model's default) for a
    model's drafts. A suffix key's is per position: the match's prior times, from the
    second draft on, its share bucket's middle (the paper's estimate of a draft's chance;
    the prior says how far the target follows earlier text at all)."""
    if not key[1]:
        return None
    first = match_prior(key[1][:2])
    if len(key[1]) != 3:
        return first
    return [first] + [first * share_value(bucket) for bucket in key[1][2]] + [first]
