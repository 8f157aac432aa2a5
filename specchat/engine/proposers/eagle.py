"""EAGLE-3 drafting: ``observe`` queues the target's features for the positions it kept;
``propose`` runs the queued pairs through the head, then drafts k tokens, feeding each back
with the head's pre-norm output, each from q = warp(head logits). Missing features cost
acceptance, never exactness (docs/design/proposers.md).
"""

from __future__ import annotations

import torch

from specchat.engine.backends import Backend, common_prefix_length
from specchat.engine.trees.eagle import dynamic_tree
from specchat.engine.proposers.base import HeadProposer, Proposal
from specchat.engine.sampling import SamplingParams, on_target_vocab, sample, warp
from specchat.heads.drafter import Drafter
from specchat.heads.eagle3 import Eagle3Head
from specchat.heads.int8 import AVAILABLE as INT8_AVAILABLE

MAX_QUEUED = 128  # positions whose features wait for the head's next turn: beyond this, the oldest go


class EagleProposer(HeadProposer):
    """Drafts with an EAGLE-3 head reading ``target``'s features."""

    kind = "eagle3"

    def __init__(self, head: Eagle3Head, target: Backend, num_speculative_tokens: int | str = 3,
                 max_speculative_tokens: int | None = None, siblings: int = 1, int8: bool | None = None,
                 tree: str = "first") -> None:
        super().__init__(head, target, num_speculative_tokens, max_speculative_tokens, siblings, tree)
        # int8 weights (heads/int8.py) read a quarter of the bytes; None: on a CPU, where that is the cost
        if int8 is None:
            int8 = torch.device(self.device).type == "cpu" and INT8_AVAILABLE
        self.drafter = Drafter(self.head, int8=bool(int8))  # the head's arithmetic in fewer operations
        target.request_features(head.config.layer_ids)
        self._draft_ids = head.draft_ids()  # [V_draft] target id of each draft id
        self._cache = self.drafter.new_cache()
        self._seen: list[int] = []  # ids the head's cached pairs were made from
        self._queued: dict[int, torch.Tensor] = {}  # position → features [F] not yet run
        self._drafted = 0
        self._warm = False  # whether the last step's drafts were the head's

    def reset(self) -> None:
        self._cache, self._seen, self._queued, self._drafted, self._warm = self.drafter.new_cache(), [], {}, 0, False

    def drafted_elsewhere(self, k: int) -> None:
        """The features of those of them the target keeps are queued all the same."""
        self._drafted, self._warm = k, False

    def observe(self, num_accepted: int) -> None:
        features = self.target.last_features
        if features is None:
            return
        start = self.target.features_start
        # rows of the verify call that were kept (after a tree, the backend kept only those)
        kept = features.shape[0] - (0 if self._tree else self._drafted - num_accepted)
        for row in range(max(0, self._cache.end - start), kept):
            self._queued[start + row] = features[row]
        if len(self._queued) > MAX_QUEUED:  # a long stretch another proposer (or none) drafted:
            for position in sorted(self._queued)[:-MAX_QUEUED]:  # the head's catch-up stays bounded,
                del self._queued[position]  # and attention simply skips what it never saw
        self.target.last_features = None  # each call's rows are queued once
        self._drafted = 0

    @torch.inference_mode()
    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        self._drafted, warm, self._warm, self._tree = 0, self._warm, True, False
        last = len(ids) - 2  # the last position the target ran; ids[-1] is its newest token
        self._sync(ids)
        positions = sorted(p for p in self._queued if p <= last)
        if positions:
            g = self.drafter.fuse(torch.stack([self._queued.pop(p) for p in positions]))  # [T, H]
            tokens = torch.tensor([ids[p + 1] for p in positions], dtype=torch.long, device=self.device)
            self.drafter.step(self._cache, tokens, g, positions)
            self._seen = list(ids)
        prenorm = self._cache.tail
        if k <= 0 or prenorm is None or self._cache.end != last + 1:
            return Proposal(torch.empty(0, dtype=torch.long, device=self.device), None,
                            source=self.kind)  # no features yet
        if self.siblings > 1 and self.tree_shape == "dynamic":
            return self._dynamic(last, prenorm, k, params, generator, 0 if warm else len(positions))
        drafts, qs, rivals = [], [], []
        for i in range(k):
            logits = self.drafter.logits(prenorm)
            q_draft = warp(logits, params)  # [1, V_draft]
            pick = sample(q_draft, generator)  # [1] a draft-vocabulary index
            token = self._draft_ids[pick]
            drafts.append(token)
            qs.append(self._on_target_vocab(q_draft))  # [1, V]
            if i == 0 and self.siblings > 1:
                rivals = self._rivals(logits.softmax(-1) if params.greedy else q_draft, pick, params, generator)
            if i + 1 < k:  # the last draft is verified, never run through the head
                prenorm = self.drafter.step(self._cache, token, prenorm, [last + 1 + i])
        self._cache.truncate(last + 1)  # drafts are re-made from the target's features once kept
        self._drafted, self._tree = k, bool(rivals)
        # a tree: the chain first, then the first draft's rivals beside it
        parents = tuple(range(-1, k - 1)) + (-1,) * len(rivals) if rivals else None
        # pairs queued while another proposer drafted are catch-up, not the cost of drafting
        return Proposal(torch.cat(drafts + [t for t, _ in rivals]), torch.cat(qs + [q for _, q in rivals]), forwards=k,
                        source=self.kind, catch_up_tokens=0 if warm else len(positions), parents=parents)

    def _dynamic(self, last: int, prenorm: torch.Tensor, k: int, params: SamplingParams,
                 generator: torch.Generator | None, catch_up: int) -> Proposal:
        """An EAGLE-2-style tree, ``k`` deep and ``siblings`` nodes a depth (trees/eagle.py)."""
        nodes, forwards = dynamic_tree(self.drafter, self._cache, prenorm, last, k, self.siblings, params, generator,
                                       self._draft_ids, self.target.max_tree_leaves)
        self._cache.truncate(last + 1)  # drafts are re-made from the target's features once kept
        self._drafted, self._tree = len(nodes), bool(nodes)
        if not nodes:
            return Proposal(torch.empty(0, dtype=torch.long, device=self.device), None, source=self.kind)
        tokens = torch.cat([self._draft_ids[v.token] for v in nodes])
        q = torch.cat([self._on_target_vocab(v.law) for v in nodes])
        return Proposal(tokens, q, forwards=forwards, source=self.kind, catch_up_tokens=catch_up,
                        parents=tuple(v.parent for v in nodes))

    def _on_target_vocab(self, q_draft: torch.Tensor) -> torch.Tensor:
        return on_target_vocab(q_draft, self._draft_ids, self.vocab_size or self.head.config.vocab_size)

    def _rivals(self, q_draft: torch.Tensor, first: torch.Tensor, params: SamplingParams,
                generator: torch.Generator | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Up to siblings − 1 more first drafts, each drawn from q_draft without the ids
        drawn before it (renormalised) → [(target id [1], its law [1, V])]. Greedy: the
        head's next-best ids (q_draft is then its plain softmax; their laws point masses)."""
        out, law = [], q_draft.clone()
        law[0, first] = 0.0
        for _ in range(self.siblings - 1):
            mass = law.sum()
            if mass <= 0:
                break  # every id of the law is drafted already
            law = law / mass
            if params.greedy:
                pick = law.argmax(-1)
                point = torch.zeros_like(law)
                point[0, pick] = 1.0
                out.append((self._draft_ids[pick], self._on_target_vocab(point)))
            else:
                pick = sample(law, generator)
                out.append((self._draft_ids[pick], self._on_target_vocab(law)))
            law = law.clone()
            law[0, pick] = 0.0
        return out

    def _sync(self, ids: list[int]) -> None:
        """Drops cached pairs that no longer match ``ids`` (a new turn that edits the
        conversation, a rollback further back): the pair at position p used ids[p + 1]."""
        if not self._seen:
            return
        agree = common_prefix_length(self._seen, ids)
        if agree < len(self._seen):
            self._cache.truncate(max(0, agree - 1))
            self._queued = {p: f for p, f in self._queued.items() if p < agree - 1}
            self._seen = self._seen[:agree]
