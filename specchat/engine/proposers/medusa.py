"""Medusa-1 drafting: ``observe`` keeps h_P, the final hidden state at the last position
the target ran and kept; ``propose`` drafts token P + 1 + j from head j − 1, all from h_P in
one pass, each from q = warp(head logits). A step without h_P drafts nothing (docs/design/proposers.md).
"""

from __future__ import annotations

import torch

from specchat.engine.backends import Backend, common_prefix_length
from specchat.engine.trees.grow import grow
from specchat.engine.proposers.base import HeadProposer, Proposal
from specchat.engine.sampling import SamplingParams, on_target_vocab, sample, warp
from specchat.heads.medusa import MedusaHead


class MedusaProposer(HeadProposer):
    """Drafts with Medusa-1 heads reading ``target``'s final hidden states."""

    kind = "medusa"

    def __init__(self, head: MedusaHead, target: Backend, num_speculative_tokens: int | str = 3,
                 max_speculative_tokens: int | None = None, siblings: int = 1, tree: str = "first") -> None:
        super().__init__(head, target, num_speculative_tokens, max_speculative_tokens, siblings, tree)  # trees/grow.py
        # head i drafts position i + 1 of the chain: no head, no draft
        self.max_speculative_tokens = min(self.max_speculative_tokens, head.num_heads)
        target.request_final_hidden()
        self._hidden: torch.Tensor | None = None  # h_P [1, H]
        self._position = -1  # P
        self._drafted = 0

    def reset(self) -> None:
        self._hidden, self._position, self._drafted = None, -1, 0

    def observe(self, num_accepted: int) -> None:
        rows = self.target.last_final_hidden  # [num_logits, H]: the verify call's positions
        if rows is None:
            return
        # the rejected drafts' rows go (after a tree the backend kept only the walked path's)
        kept = rows.shape[0] - (0 if self._tree else self._drafted - num_accepted)
        if kept > 0:
            self._hidden = rows[kept - 1:kept]
            self._position = self.target.final_hidden_start + kept - 1
        self.target.last_final_hidden = None  # each call's rows are read once
        self._drafted = 0

    @torch.inference_mode()
    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        self._drafted = 0
        last = len(ids) - 2  # the last position the target ran; ids[-1] is its newest token
        k = min(k, self.head.num_heads)
        # h_P is stale where the target's cache no longer holds ids[:P + 1] (an edited turn, a reset)
        if (k <= 0 or self._hidden is None or self._position != last
                or common_prefix_length(self.target.ids, ids) < len(ids) - 1):
            return Proposal(torch.empty(0, dtype=torch.long, device=self.device), None, source=self.kind)
        logits = self.head(self._hidden[0], k)  # [k, V_draft]: head j − 1 → draft j
        self._tree = self.siblings > 1
        if self._tree:
            return self._candidate_tree(logits, k, params, generator)
        q_draft = warp(logits, params)  # [k, V_draft]
        picks = sample(q_draft, generator)  # [k] row indices
        q = on_target_vocab(q_draft, self.head.token_map, self.vocab_size or self.head.config.vocab_size)  # [k, V]
        self._drafted = k
        return Proposal(self.head.token_map[picks], q, forwards=k, source=self.kind)

    def _candidate_tree(self, logits: torch.Tensor, k: int, params: SamplingParams,
                        generator: torch.Generator | None) -> Proposal:
        """A tree k deep: head d's law for every child at depth d + 1 (the heads never see
        the drafts), each node's children drawn without replacement from it."""
        laws = logits.softmax(-1) if params.greedy else warp(logits, params)  # [k, V_draft]
        widths = [self.siblings] * k if self.tree_shape == "dynamic" else [self.siblings] + [1] * (k - 1)
        nodes = grow(laws[0:1], widths, params, generator,
                     lambda level, _: [laws[v.depth: v.depth + 1] for v in level], self.target.max_tree_leaves)
        self._drafted = len(nodes)
        tokens = self.head.token_map[torch.cat([v.token for v in nodes])]
        q = on_target_vocab(torch.cat([v.law for v in nodes]), self.head.token_map,
                            self.vocab_size or self.head.config.vocab_size)
        return Proposal(tokens, q, forwards=k, source=self.kind, parents=tuple(v.parent for v in nodes))
