"""Proposers draft up to k tokens ahead of the target: ``propose(ids, k, params, generator)``
returns the drafts and, for a model, the laws q they were drawn from (None for point
masses); ``observe(num_accepted)`` reports the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specchat.config.model import MAX_SPECULATIVE_TOKENS
from specchat.engine.backends import Backend, as_backend, common_prefix_length
from specchat.engine.proposers.ngram_index import NgramIndex, NgramMatch
from specchat.engine.sampling import SamplingParams, on_vocab, sample, warp


@dataclass
class Proposal:
    """tokens: [k'] drafted ids (k' ≤ k), on the proposer's device. q: [k', V] their laws on
    the target's vocabulary, or None for point masses. forwards: draft-model passes spent.
    catch_up_tokens: context tokens the draft model ran beyond the one or two a warm draft
    runs (those it missed while others drafted): in the draft time, but no cost of drafting."""

    tokens: torch.Tensor
    q: torch.Tensor | None
    forwards: int = 0
    catch_up_tokens: int = 0
    source: str = ""  # the proposer kind that drafted them: a name in specchat.methods
    # a tree of drafts (engine/trees/walk.py): node i's parent (-1: the last context token), and
    # q[i] the law node i was drawn from given its earlier siblings; None: a chain
    parents: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Candidate:
    """One way a proposer can draft the next step: ``source`` can give up to ``limit``
    drafts; ``match``: the n-gram match behind them (None for a model); ``shares``: suffix
    decoding's share of occurrences that went on with each draft (suffix.py), () for the
    others; ``behind``: the catch-up tokens a draft model would run first."""

    source: str
    limit: int
    match: NgramMatch | None = None
    shares: tuple[float, ...] = ()
    behind: int = 0


class Proposer:
    """``num_speculative_tokens``: the default γ (an int, or "auto" with
    ``max_speculative_tokens`` as its ceiling)."""

    kind = "none"
    # declared, not probed:
    can_rollback = True  # its state survives dropping rejected drafts
    sampling_device: torch.device | None = None  # where its random draws happen (None: it has none)
    point_mass = False  # point-mass drafts with no model state (n-gram lookup)
    vocab_size: int | None = None  # the target's, set by the engine (q is reported on it)
    drafting_model = ""  # the source name of a separate draft model (γ = auto times it first)

    def __init__(self, num_speculative_tokens: int | str = 5, max_speculative_tokens: int | None = None) -> None:
        if num_speculative_tokens == "auto":
            self.max_speculative_tokens = int(max_speculative_tokens or 8)
        else:
            self.max_speculative_tokens = int(max_speculative_tokens or num_speculative_tokens)
            if not 1 <= int(num_speculative_tokens) <= MAX_SPECULATIVE_TOKENS:
                raise ValueError(f"num_speculative_tokens must be 1..{MAX_SPECULATIVE_TOKENS} or 'auto', "
                                 f"got {num_speculative_tokens!r}")
        self.num_speculative_tokens = num_speculative_tokens

    def prefill(self, ids: list[int]) -> None:
        """Warms any state on the prompt (timed as prefill, not as drafting)."""

    def candidates(self, ids: list[int], limit: int) -> list[Candidate]:
        """What it can draft after ``ids``, one entry per source; [] for nothing (an n-gram miss)."""
        return [Candidate(self.kind, limit)]

    def select(self, source: str) -> None:
        """The controller's pick among ``candidates`` for the next ``propose``."""

    def drafted_elsewhere(self, k: int) -> None:
        """Another source of a hybrid drafted this step's k tokens (a draft model catches up itself)."""

    def place(self, device: torch.device) -> None:
        """The target's device: point-mass drafts are made there."""

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        raise NotImplementedError

    def observe(self, num_accepted: int) -> None:
        """How many of the last proposal's drafts the target kept."""

    def reset(self) -> None:
        """Forgets cached state (a new chat)."""


class HeadProposer(Proposer):
    """Drafts with a head (a Method row's ``head``) on what of ``target`` it ``reads``, beside it on its
    device; ``siblings`` > 1 drafts a tree: "first" (the first draft's rivals) or "dynamic" (every depth)."""

    def __init__(self, head, target: Backend, num_speculative_tokens: int | str = 3,
                 max_speculative_tokens: int | None = None, siblings: int = 1, tree: str = "first") -> None:
        super().__init__(num_speculative_tokens, max_speculative_tokens)
        if not (target.provides_features if head.reads == "features" else target.provides_final_hidden):
            raise ValueError(target.features_note if head.reads == "features" else target.final_hidden_note)
        if siblings > 1 and not target.supports_trees:
            raise ValueError(f"the {target.name} backend verifies chains only: siblings = {siblings} needs a tree")
        if siblings > (target.max_tree_leaves or siblings):
            raise ValueError(f"the {target.name} backend verifies trees of at most {target.max_tree_leaves} leaves")
        if tree not in ("first", "dynamic"):
            raise ValueError(f"tree = {tree!r}: 'first' or 'dynamic'")
        self.siblings, self.tree_shape, self._tree = siblings, tree, False  # _tree: the last proposal was one
        self.device = self.sampling_device = target.device  # a GPU's, or the host
        self.head, self.target = head.to(self.device).eval(), target


class DraftModelProposer(Proposer):
    """A smaller causal LM of the same tokenizer drafts k tokens, each from q = warp(logits)."""

    kind = "draft_model"
    drafting_model = "draft_model"

    def __init__(self, draft_model: Backend | torch.nn.Module, num_speculative_tokens: int | str = 5,
                 max_speculative_tokens: int | None = None) -> None:
        super().__init__(num_speculative_tokens, max_speculative_tokens)
        self.lm = as_backend(draft_model)
        self.max_length = self.lm.max_length
        self.can_rollback = self.lm.can_rollback
        self.sampling_device = self.lm.device
        self._view: tuple[list[int], list[int]] = ([], [])  # (ids, what the draft is shown for them)

    def _context(self, ids: list[int]) -> list[int]:
        """The ids as the draft can read them: an id past its embedding rows (a target with
        more rows) is shown as 0, which costs acceptance, never exactness."""
        if self.lm.vocab_size >= (self.vocab_size or 0):
            return ids
        seen, shown = self._view
        n = common_prefix_length(seen, ids)
        rows = self.lm.vocab_size
        shown = shown[:n] + [i if i < rows else 0 for i in ids[n:]]
        self._view = (list(ids), shown)
        return shown

    def prefill(self, ids: list[int]) -> None:
        if len(ids) > 1 and len(ids) <= self.max_length:
            self.lm.forward(self._context(ids)[:-1], num_logits=1)

    def _behind(self, ids: list[int]) -> int:
        """Tokens the next forward runs (the draft's cache against the context)."""
        return len(ids) - common_prefix_length(self.lm.ids, ids)

    def candidates(self, ids: list[int], limit: int) -> list[Candidate]:
        return [Candidate(self.kind, limit, behind=max(0, self._behind(self._context(ids)) - 2))]

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        k = min(k, self.max_length - len(ids))
        if k <= 0:
            return Proposal(torch.empty(0, dtype=torch.long), None)
        ids = self._context(ids)
        behind = self._behind(ids)
        vocab = self.vocab_size or self.lm.vocab_size
        logits = self.lm.forward(ids)  # [1, V_draft]
        drafts, qs = [], []
        for i in range(k):
            # the draft never proposes an id the target has no row for (p = 0 there)
            q = warp(logits[:, :vocab], params)  # [1, min(V_draft, V)]
            token = sample(q, generator)  # [1]
            drafts.append(token)
            qs.append(on_vocab(q, vocab))  # [1, V]
            if i + 1 < k:  # the last draft is verified, never run through the draft
                logits = self.lm.extend(token)
        return Proposal(torch.cat(drafts), torch.cat(qs), forwards=k, catch_up_tokens=max(0, behind - 2),
                        source=self.kind)

    def reset(self) -> None:
        self.lm.reset()


class NgramProposer(Proposer):
    """Prompt lookup (ngram_index.py): the tokens that followed an earlier occurrence of the
    context's last n tokens, as point masses; the match (agreement, consensus) keys the
    adaptive controller's acceptance estimates."""

    kind = "ngram"
    point_mass = True

    def __init__(self, num_speculative_tokens: int | str = 5, prompt_lookup_min: int = 1,
                 prompt_lookup_max: int = 3, max_speculative_tokens: int | None = None) -> None:
        super().__init__(num_speculative_tokens, max_speculative_tokens)
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        self.prompt_lookup_min = prompt_lookup_min
        self.prompt_lookup_max = prompt_lookup_max
        self.device = torch.device("cpu")  # until the engine places it
        self._index = NgramIndex()
        self._memo: tuple | None = None  # this step's lookup, shared by the controller and propose

    def lookup(self, ids: list[int], k: int) -> tuple[list[int], NgramMatch | None]:
        """(continuation of at most k ids, its match); ([], None) without a match. The
        controller's look and propose's share one lookup, memoised for the step."""
        key = (id(ids), len(ids))
        if self._memo is not None and self._memo[0] == key and self._memo[1] >= k:
            continuation, match = self._memo[2]
            return continuation[:k], match
        found = self._find(ids, k)
        self._memo = (key, k, found)
        return found

    def _find(self, ids: list[int], k: int) -> tuple[list[int], NgramMatch | None]:
        return self._index.lookup(ids, k, self.prompt_lookup_min, self.prompt_lookup_max)

    def candidates(self, ids: list[int], limit: int) -> list[Candidate]:
        continuation, match = self.lookup(ids, limit)
        return [Candidate(self.kind, len(continuation), match)] if continuation else []

    def place(self, device: torch.device) -> None:
        self.device = device

    def observe(self, num_accepted: int) -> None:
        self._memo = None

    def reset(self) -> None:
        self._memo = None
        self._index.reset()

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        tokens = self.lookup(ids, k)[0] if k > 0 else []
        return Proposal(torch.tensor(tokens, dtype=torch.long, device=self.device), None, source=self.kind)
