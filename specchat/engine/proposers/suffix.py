"""Suffix decoding (Oliaro et al. 2024, arXiv 2411.04975; vLLM's ``suffix``) over the
request's context and, given a store, this user's earlier replies: each depth drafts the
token most still-agreeing occurrences went on with, while the product of those shares
stays above ``min_score`` (docs/design/proposers.md).
"""

from __future__ import annotations

from collections import Counter

from specchat.engine.proposers.base import Candidate, NgramProposer
from specchat.engine.proposers.ngram_index import MAX_OCCURRENCES, NgramMatch, agreement
from specchat.engine.proposers.suffix_store import END, SuffixStore

MIN_SCORE = 0.1  # a draft is kept only while the occurrences' agreement product stays above this


class SuffixProposer(NgramProposer):
    kind = "suffix"

    def __init__(self, num_speculative_tokens: int | str = 5, prompt_lookup_min: int = 1,
                 prompt_lookup_max: int = 3, max_speculative_tokens: int | None = None,
                 min_score: float = MIN_SCORE, store: SuffixStore | None = None) -> None:
        super().__init__(num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, max_speculative_tokens)
        self.min_score = min_score
        self.store = store  # earlier replies (the global tree); None: the request's context alone
        self.shares: list[float] = []  # the last lookup's share per draft (score_j / score_{j−1})

    def candidates(self, ids: list[int], limit: int) -> list[Candidate]:
        continuation, match = self.lookup(ids, limit)
        if not continuation:
            return []
        # the lookup's own: _find sets the shares with the draft (a memo hit is of that _find)
        return [Candidate(self.kind, len(continuation), match, tuple(self.shares[:len(continuation)]))]

    def _find(self, ids: list[int], k: int) -> tuple[list[int], NgramMatch | None]:
        index, store = self._index, self.store
        index.sync(ids, self.prompt_lookup_max)
        end = len(ids) - 1
        for n in range(min(self.prompt_lookup_max, end), self.prompt_lookup_min - 1, -1):
            gram = ids[end - n + 1:]
            # most recent first: a tie goes to the latest text, as prompt lookup's does
            found = [(ids, j) for j in reversed(index.positions(gram, n)[-1 - MAX_OCCURRENCES:-1])]  # not the end
            if store is not None and len(found) < MAX_OCCURRENCES:
                found += [(store.tokens, j) for j in reversed(store.positions(gram)[-(MAX_OCCURRENCES - len(found)):])]
            if not found:
                continue
            # a cursor: (the text, where in it the occurrence goes on); the context's own
            # cursors stop at its end, the store's at their reply's END
            cursors, draft, self.shares, score = [(text, j + 1) for text, j in found], [], [], 1.0
            first = Counter(text[c] for text, c in cursors)
            while len(draft) < k and cursors:
                votes = Counter(text[c] for text, c in cursors)
                token, count = votes.most_common(1)[0]
                share = count / len(cursors)
                score *= share
                if token == END or score < self.min_score:  # most of them ended their reply here
                    break
                if self.vocab_size is not None and token >= self.vocab_size:
                    break  # a store checked against the tokenizer, whose ids a target lacks a row for
                draft.append(token)
                self.shares.append(share)
                cursors = [(text, c + 1) for text, c in cursors if text[c] == token and c + 1 < len(text)]
            agreeing = first[draft[0]] - 1 if draft else 0
            longest = max(agreement(text, j, ids, n) for text, j in found)
            return draft, NgramMatch(longest, agreeing, len(found) - 1 - agreeing)
        return [], None

