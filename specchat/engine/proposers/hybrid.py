"""Hybrid drafting: n-gram lookup where the context has a match, a model elsewhere (an
EAGLE-3 head: "hybrid"; a draft model: "ngram_draft"). The adaptive controller picks the
source each step and ``select`` routes the next ``propose`` there (docs/design/proposers.md).
"""

from __future__ import annotations

import torch

from specchat.engine.proposers.base import Candidate, NgramProposer, Proposal, Proposer
from specchat.engine.sampling import SamplingParams

HEAD_CEILING = 4  # the head's chains stop here: each further draft is kept less often


class HybridProposer(Proposer):
    kind = "hybrid"

    def __init__(self, ngram: NgramProposer, head: Proposer, max_speculative_tokens: int | None = None) -> None:
        super().__init__("auto", max_speculative_tokens or max(ngram.max_speculative_tokens, head.max_speculative_tokens))
        self.ngram, self.head = ngram, head  # head: the model that drafts, an EAGLE-3 head or a draft model
        self.head_limit = head.max_speculative_tokens  # a head's chain degrades fast: its own ceiling
        self.ngram.place(head.sampling_device or torch.device("cpu"))  # until the engine places it
        self.sampling_device = head.sampling_device
        self.can_rollback = ngram.can_rollback and head.can_rollback
        self.drafting_model = head.drafting_model
        self._route: Proposer = ngram

    @property
    def vocab_size(self) -> int | None:  # type: ignore[override]
        return self.head.vocab_size

    @vocab_size.setter
    def vocab_size(self, value: int | None) -> None:
        self.head.vocab_size = self.ngram.vocab_size = value

    def candidates(self, ids: list[int], limit: int) -> list[Candidate]:
        return self.ngram.candidates(ids, limit) + self.head.candidates(ids, min(limit, self.head_limit))

    def place(self, device: torch.device) -> None:
        self.ngram.place(device)

    def select(self, source: str) -> None:
        self._route = self.head if source == self.head.kind else self.ngram

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        proposal = self._route.propose(ids, k, params, generator)
        if self._route is not self.head:
            self.head.drafted_elsewhere(len(proposal.tokens))
        return proposal

    def observe(self, num_accepted: int) -> None:
        self.ngram.observe(num_accepted)
        self.head.observe(num_accepted)

    def reset(self) -> None:
        self.ngram.reset()
        self.head.reset()


class NgramDraftProposer(HybridProposer):
    """n-gram lookup where the context has a match, the draft model elsewhere."""

    kind = "ngram_draft"
