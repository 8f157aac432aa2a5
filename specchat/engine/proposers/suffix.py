"""Suffix decoding (SuffixDecoding, Oliaro et al. 2024, arXiv 2411.04975; vLLM's ``suffix``
method, after ArcticInference's suffix_tree.cc), over the request's own context.

Where prompt lookup (NgramProposer) copies what followed one chosen earlier occurrence of
the context's last tokens, suffix decoding walks what followed all of them, as a suffix
tree does below the node of the longest suffix that occurred before: at each depth it
drafts the token most of the still-agreeing occurrences went on with, and scores the
draft by the product of those shares — the estimated probability that the target keeps
every draft so far. Drafting stops where that score falls below ``min_score``, so the
draft length adapts to how much the earlier text agrees (a long unanimous quote drafts
deep; a split one stops at the split), and Σ score is the number of drafts the text
expects kept. Drafts are point masses: verified like prompt lookup's, exact whatever
they are.

Not here yet: the global tree over earlier chats' replies (the paper's cross-request
speed-up), and Σ score as the cost gate's acceptance estimate (the adaptive controller
keys its estimates on the match, as it does for prompt lookup).
"""

from __future__ import annotations

from collections import Counter

from specchat.engine.proposers.base import NgramProposer
from specchat.engine.proposers.ngram_index import MATCH_CAP, MAX_OCCURRENCES, NgramMatch

MIN_SCORE = 0.1  # a draft is kept only while the occurrences' agreement product stays above this


class SuffixProposer(NgramProposer):
    kind = "suffix"

    def __init__(self, num_speculative_tokens: int | str = 5, prompt_lookup_min: int = 1,
                 prompt_lookup_max: int = 3, max_speculative_tokens: int | None = None,
                 min_score: float = MIN_SCORE) -> None:
        super().__init__(num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, max_speculative_tokens)
        self.min_score = min_score
        self.scores: list[float] = []  # the last lookup's draft scores (Σ: drafts expected kept)

    def _find(self, ids: list[int], k: int) -> tuple[list[int], NgramMatch | None]:
        index = self._index
        index.sync(ids, self.prompt_lookup_max)
        end = len(ids) - 1
        for n in range(min(self.prompt_lookup_max, end), self.prompt_lookup_min - 1, -1):
            positions = index.positions(ids[end - n + 1:], n)[-1 - MAX_OCCURRENCES:-1]  # not the context's own end
            if not positions:
                continue
            # most recent first: a tie goes to the latest text, as prompt lookup's does
            cursors, draft, self.scores, score = [j + 1 for j in reversed(positions)], [], [], 1.0
            first = Counter(ids[c] for c in cursors)
            while len(draft) < k and cursors:
                votes = Counter(ids[c] for c in cursors)
                token, count = votes.most_common(1)[0]
                score *= count / len(cursors)
                if score < self.min_score:
                    break
                draft.append(token)
                self.scores.append(score)
                cursors = [c + 1 for c in cursors if ids[c] == token and c + 1 <= end]
            agreeing = first[draft[0]] - 1 if draft else 0
            longest = max(_agreement(ids, j, n) for j in positions)
            return draft, NgramMatch(longest, agreeing, len(positions) - 1 - agreeing)
        return [], None


def _agreement(ids: list[int], j: int, n: int) -> int:
    """How far back (≤ MATCH_CAP) the text ending at ``j`` agrees with the context's end,
    given that its last ``n`` tokens do."""
    end, agree = len(ids) - 1, n
    while agree < MATCH_CAP and j >= agree and ids[j - agree] == ids[end - agree]:
        agree += 1
    return agree
