"""Proposers draft up to k tokens ahead of the target.

One small interface (transformers' get_candidates / update_candidate_strategy pair,
without returning the whole sequence): ``propose(ids, k, params, generator)`` returns
the drafts and, for a draft model, the distributions q they were sampled from (None
for point-mass drafts); ``observe(num_accepted)`` reports the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specchat.config.model import MAX_SPECULATIVE_TOKENS
from specchat.engine.backends import Backend, as_backend, common_prefix_length
from specchat.engine.proposers.ngram_index import MATCH_CAP, NgramIndex, NgramMatch
from specchat.engine.sampling import SamplingParams, on_vocab, sample, warp


@dataclass
class Proposal:
    """tokens: [k'] drafted ids (k' ≤ k, possibly 0), on the proposer's device.
    q: [k', V] the distributions they were drawn from, on the target's vocabulary V (ids the
       draft model has no row for have probability 0), or None for point masses.
    forwards: draft-model forward passes spent.
    catch_up_tokens: context tokens the draft model ran before drafting beyond the one or
       two a warm draft runs (the last emitted token; after a bonus also the last draft) —
       the tokens it missed while the target decoded plainly. Their time is in the step's
       draft time but is no cost of drafting (controller.py, telemetry.py)."""

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
    """One way a proposer can draft the next step: ``source`` (a proposer kind) can give
    up to ``limit`` drafts; ``match`` is the n-gram match behind them (None for a model),
    which the adaptive controller keys its acceptance estimates on. ``shares``: suffix
    decoding's word on each draft, the share of the still-agreeing earlier occurrences
    that went on with it (score_j / score_{j−1}, suffix.py), which the controller's
    starting acceptance follows; () for the others. ``behind``: the catch-up tokens a draft
    model would run first (as :class:`Proposal` counts them)."""

    source: str
    limit: int
    match: NgramMatch | None = None
    shares: tuple[float, ...] = ()
    behind: int = 0


class Proposer:
    """Base class; ``num_speculative_tokens`` is the default γ (an int, or "auto" for the
    adaptive controller with ``max_speculative_tokens`` as its ceiling)."""

    kind = "none"
    # declared, not probed: whether its state survives dropping rejected drafts (a draft
    # model's cache must roll back), and where its random draws happen (None: it has none)
    can_rollback = True
    sampling_device: torch.device | None = None
    # whether its drafts are point masses with no model state (n-gram lookup): what the
    # batched engine verifies (engine/batch/batched.py)
    point_mass = False
    # the target's vocabulary size; the engine sets it (q is reported on it)
    vocab_size: int | None = None
    # the source name of a separate draft model it drafts with, which γ = auto times before
    # the first reply (engine/gamma/calibrate.py); "" for none
    drafting_model = ""

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
        """What this proposer can draft after ``ids`` (at most ``limit`` tokens), one
        entry per source; none when it has nothing to offer (an n-gram miss)."""
        return [Candidate(self.kind, limit)]

    def select(self, source: str) -> None:
        """The controller's pick among ``candidates`` for the next ``propose``."""

    def drafted_elsewhere(self, k: int) -> None:
        """Another source of a hybrid drafted this step's k tokens (hybrid.py). A draft
        model needs nothing: it catches up on the ids at its next proposal."""

    def place(self, device: torch.device) -> None:
        """The target's device, told by the engine: point-mass drafts are made there (a
        model's drafts stay on its own device)."""

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Proposal:
        raise NotImplementedError

    def observe(self, num_accepted: int) -> None:
        """Told how many of the last proposal's drafts the target kept."""

    def reset(self) -> None:
        """Forgets cached state (a new chat)."""


class DraftModelProposer(Proposer):
    """A smaller causal LM of the same tokenizer drafts k tokens autoregressively,
    sampling each from q = warp(draft logits) with the target's sampling settings."""

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
        """The ids as the draft can read them. A target with more rows than the draft may
        emit an id the draft has no embedding for (a padding row sampled, or a test's
        smaller draft): the draft is shown id 0 there. Any context is exact — q is
        whatever the draft then samples from — so this only costs acceptance, and only
        ids new since the last call are looked at."""
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
    """Prompt lookup: find earlier occurrences of the context's last n tokens (n from
    prompt_lookup_max down to prompt_lookup_min) and propose the tokens that followed the
    one whose preceding text agrees longest with the context (ngram_index.py). Drafts are point
    masses (q = 1 on the drafted token).

    The match reported with a lookup (:class:`~specchat.engine.proposers.ngram_index.NgramMatch`) says how
    far back the context agrees with the text before that occurrence, and whether the
    n-gram's other occurrences were followed by the same token; acceptance differs widely
    with both (ngram_index.py), so the adaptive controller keys its estimates on both."""

    kind = "ngram"
    MATCH_CAP = MATCH_CAP

    point_mass = True

    def __init__(self, num_speculative_tokens: int | str = 5, prompt_lookup_min: int = 1,
                 prompt_lookup_max: int = 3, max_speculative_tokens: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(num_speculative_tokens, max_speculative_tokens)
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        self.prompt_lookup_min = prompt_lookup_min
        self.prompt_lookup_max = prompt_lookup_max
        self.device = torch.device(device)
        self._index = NgramIndex()
        self._memo: tuple | None = None  # this step's lookup, shared by the controller and propose

    def lookup(self, ids: list[int], k: int) -> tuple[list[int], NgramMatch | None]:
        """(continuation of at most k ids, its match); ([], None) without a match.

        The adaptive controller looks before it chooses γ and propose looks again: the
        second look reuses the first (a shorter continuation is a prefix of a longer one).
        The memo lives for one step (``observe`` clears it); a stale one could only cost
        speed, never exactness — drafts are verified."""
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
