"""Prompt lookup's search: the longest n-gram of the context's end that occurred before
(its MAX_OCCURRENCES most recent occurrences), the occurrence that agrees longest, then by
consensus, then the most recent (docs/design/proposers.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from specchat.engine.backends.base import common_prefix_length

MATCH_CAP = 16  # agreement is measured up to this many tokens
MAX_OCCURRENCES = 64  # a lookup weighs this many of the n-gram's most recent occurrences


@dataclass(frozen=True, slots=True)
class NgramMatch:
    """length: how many tokens the context's end agrees with the text before the chosen
    occurrence (at least the n-gram matched; counted up to MATCH_CAP). agreeing / rival: how many
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
    """Positions of every n-gram of the context (n = 1 .. the longest looked up), by value."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._ids: list[int] = []
        self._where: list[dict[tuple[int, ...], list[int]]] = []  # [n - 1]: n-gram → positions of its last token

    def sync(self, ids: list[int], max_n: int) -> None:
        """Follows ``ids``: drops what no longer matches, indexes what is new (n-grams up
        to ``max_n`` tokens)."""
        seen = self._ids
        keep = common_prefix_length(seen, ids)
        if len(self._where) < max_n:  # a longer n-gram than before: index everything again
            self._where, keep = [{} for _ in range(max_n)], 0
        for end in range(len(seen) - 1, keep - 1, -1):
            for n, where in enumerate(self._where, 1):
                if n <= end + 1:
                    where[tuple(seen[end - n + 1:end + 1])].pop()
        del seen[keep:]
        for end in range(keep, len(ids)):
            seen.append(ids[end])
            for n, where in enumerate(self._where, 1):
                if n <= end + 1:
                    where.setdefault(tuple(ids[end - n + 1:end + 1]), []).append(end)

    def positions(self, gram: list[int], n: int) -> list[int]:
        """Where the n-gram ``gram`` ended in the context synced last (ascending; not a copy)."""
        return self._where[n - 1].get(tuple(gram), [])

    def lookup(self, ids: list[int], k: int, min_n: int, max_n: int) -> tuple[list[int], NgramMatch | None]:
        """(up to k ids that followed the chosen occurrence, its match); ([], None) when no
        n-gram of min_n..max_n tokens occurred before."""
        self.sync(ids, max_n)
        end = len(ids) - 1
        for n in range(min(max_n, end), min_n - 1, -1):
            positions = self._where[n - 1][tuple(ids[end - n + 1:])]
            if len(positions) < 2:  # only the context's own end
                continue
            # (agreement, position), most recent first, the context's own end left out
            found = [(agreement(ids, j, ids, n), j) for j in reversed(positions[-1 - MAX_OCCURRENCES:-1])]
            longest = max(agree for agree, _ in found)
            ties = [j for agree, j in found if agree == longest]
            votes = Counter(ids[j + 1] for j in ties)
            top = max(votes.values())
            chosen = next(j for j in ties if votes[ids[j + 1]] == top)
            first = ids[chosen + 1]
            agreeing = sum(ids[j + 1] == first for _, j in found) - 1
            return ids[chosen + 1:chosen + 1 + k], NgramMatch(longest, agreeing, len(found) - 1 - agreeing)
        return [], None


def agreement(text: list[int], j: int, ids: list[int], n: int) -> int:
    """How far back (≤ MATCH_CAP) ``text`` ending at ``j`` agrees with the context's end,
    given that its last ``n`` tokens do (END, before each of a suffix store's replies,
    agrees with no id)."""
    end, agree = len(ids) - 1, n
    while agree < MATCH_CAP and j >= agree and agree <= end and text[j - agree] == ids[end - agree]:
        agree += 1
    return agree
