"""Prompt lookup's search: where the context's last tokens occurred before, and how
much to trust what followed them.

An :class:`NgramIndex` keeps the positions of every token and every pair of tokens in the
context, and follows the context as it grows (or is rewound: a new turn, an edit), so a
lookup visits the earlier occurrences of the last pair (or token) instead of scanning the
whole context.

Of the occurrences of the longest n-gram that matches (n ≤ ``max_n``), the lookup picks
the one whose text before it agrees longest with the context's end, then the
continuation most of them share, then the most recent. It reports what the adaptive
controller keys its acceptance estimates on (:class:`NgramMatch`): the agreement length,
and whether the other occurrences were followed by the same token. Over the plain
replies to our bench's requests the first draft was kept, by consensus:

    agreement          1          2          3          5–7
    agreed     0.33–0.74  0.67–0.90  0.73–0.98  0.96–1.00
    alone      0.20–0.44  0.38–0.61  0.45–0.75  0.56–0.80
    split      0.11–0.17  0.07–0.39  0.21–0.47  0.19–0.60

(each range spans the four sets; a few cells rest on under 20 cases; docs/benchmarks/
README.md, "consensus"). Which occurrence is drafted from changes only speed: drafts
are verified.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from specchat.engine.backends.base import common_prefix_length

MATCH_CAP = 16  # agreement is measured up to this many tokens
MAX_OCCURRENCES = 64  # a lookup weighs the most recent occurrences of the last pair (or token)


@dataclass(frozen=True, slots=True)
class NgramMatch:
    """length: how many tokens the context's end agrees with the text before the chosen
    occurrence (at least the n-gram matched, at most MATCH_CAP). agreeing / rival: how many
    other occurrences of that n-gram were followed by the same / another token."""

    length: int
    agreeing: int = 0
    rival: int = 0

    @property
    def consensus(self) -> str:
        """"split" when an occurrence was followed by another token, "agreed" when others
        were all followed by the same one, "alone" for a single occurrence."""
        return "split" if self.rival else "agreed" if self.agreeing else "alone"


class NgramIndex:
    """Positions of every token and every pair of tokens in the context, by value."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._ids: list[int] = []
        self._one: dict[int, list[int]] = {}  # token → positions
        self._two: dict[tuple[int, int], list[int]] = {}  # (token before, token) → positions

    def sync(self, ids: list[int]) -> None:
        """Follows ``ids``: drops what no longer matches, indexes what is new."""
        seen = self._ids
        keep = common_prefix_length(seen, ids)
        for position in range(len(seen) - 1, keep - 1, -1):
            self._one[seen[position]].pop()
            if position:
                self._two[(seen[position - 1], seen[position])].pop()
        del seen[keep:]
        for position in range(keep, len(ids)):
            token = ids[position]
            self._one.setdefault(token, []).append(position)
            if position:
                self._two.setdefault((ids[position - 1], token), []).append(position)
            seen.append(token)

    def lookup(self, ids: list[int], k: int, min_n: int, max_n: int) -> tuple[list[int], NgramMatch | None]:
        """(up to k ids that followed the chosen occurrence, its match); ([], None) when no
        n-gram of min_n..max_n tokens occurred before."""
        self.sync(ids)
        end = len(ids) - 1
        if end < 1:
            return [], None
        # the earlier occurrences of the last pair, or where there is none (or only single
        # tokens are looked up) of the last token
        positions = self._two[(ids[end - 1], ids[end])] if max_n >= 2 else []
        agree_from = 2
        if len(positions) < 2:
            positions, agree_from = self._one[ids[end]], 1
        found: list[tuple[int, int]] = []  # (agreement, position), most recent first
        for i in range(len(positions) - 2, max(len(positions) - 2 - MAX_OCCURRENCES, -1), -1):
            j = positions[i]
            agree = agree_from
            while agree < MATCH_CAP and j >= agree and ids[j - agree] == ids[end - agree]:
                agree += 1
            found.append((agree, j))
        if not found:
            return [], None
        n = min(max(agree for agree, _ in found), max_n)
        if n < min_n:
            return [], None
        found = [(agree, j) for agree, j in found if agree >= n]  # the occurrences of the n-gram
        longest = max(agree for agree, _ in found)
        ties = [j for agree, j in found if agree == longest]
        votes = Counter(ids[j + 1] for j in ties)
        top = max(votes.values())
        chosen = next(j for j in ties if votes[ids[j + 1]] == top)
        first = ids[chosen + 1]
        agreeing = sum(ids[j + 1] == first for _, j in found) - 1
        return ids[chosen + 1:chosen + 1 + k], NgramMatch(longest, agreeing, len(found) - 1 - agreeing)
