"""Several replies decoded together, exactly: one llama.cpp decode a step for all of them.

Each step, every active sequence asks its own controller for γ and its own proposer for
drafts; one ``llama_decode`` then runs every sequence's pending tokens (the last token
it emitted, or its whole prompt on its first step) and its drafts, each row tagged with
the sequence's ``seq_id`` and position (LlamaCppBatch). Each sequence is verified on its
own rows exactly as the one-sequence engine verifies a chain (engine.verify_chain: point
masses by the coupled draw, drafts with a law q by the rejection sampler, with the
request's own generator), and the cells of its rejected drafts are dropped, its alone. A
sequence that finishes frees its slot for the next request at once (continuous batching), and
``cancel(i)`` ends request i before the next step without touching the others.
Requests come from a list, or from a RequestQueue that a server keeps filling while the
batch runs (requests.py; server.py runs one such loop in a thread).

Any proposer that drafts chains runs here, each request its own (``proposer_factory(lane)``,
``lane`` the request's sequence as a Backend: a head reads the target's layer inputs for
its rows there; a draft model drafts in a sequence of its own, lanes.py). Trees need a
unified cache: one sequence at a time verifies them (engine.py), not a batch.
Each sequence's StepStats carry its own drafting time and the whole batched step's
decode and total times (the cost every sequence in it shared), ``batch_size`` (the sequences that step decoded) and, as
``prefill_tokens``, the prompt tokens any sequence ran in it (so no controller takes such
a step's time for what verifying costs).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch

from specchat.engine import epilogue  # looked up at call time: tests plant bugs there
from specchat.engine.backends.base import Backend, common_prefix_length
from specchat.engine.gamma.batch_plan import BatchGamma, BatchPlan
from specchat.engine.batch.requests import Request, RequestQueue
from specchat.engine.gamma.controller import Assessment, Controller, make_controller
from specchat.engine.engine import verify_chain
from specchat.engine.proposers import Proposal, Proposer
from specchat.events import Step

IDLE_WAIT_S = 0.1  # with nothing to decode, how long one wait for a request lasts (a closed queue ends it sooner)


@dataclass
class _Slot:
    index: int
    request: Request
    ids: list[int]
    seed: int
    generator: torch.Generator  # the request's draws: its drafts' and the rejection sampler's
    proposer: Proposer | None
    controller: Controller
    cached: int = 0  # ids whose cells the sequence holds
    produced: int = 0  # tokens emitted so far


class BatchedEngine:
    """``generate(requests)`` yields (request index, Step) as the batch advances; a
    request's last Step has its finish reason. ``proposer_factory(lane)`` gives each
    request its own proposer (None: plain decoding) over ``lane``, the sequence it decodes
    in as a Backend; a factory with a ``close()`` is closed with the engine."""

    def __init__(self, target, n_seq: int = 4, proposer_factory: Callable[[Backend], Proposer | None] | None = None,
                 eos_token_ids: Iterable[int] | None = None, n_ctx_per_seq: int | None = None) -> None:
        if not target.batches:
            raise ValueError(f"batched decoding needs a backend that batches: {target.batch_note} (the "
                             f"{target.name} backend); the llama.cpp backend does")
        self.target, self.n_seq = target, n_seq
        self.context = target.open_batch(n_seq, n_ctx_per_seq or max(256, target.max_length // n_seq))
        self.lanes = [self.context.lane(seq) for seq in range(n_seq)]
        self.factory = proposer_factory or (lambda lane: None)
        self.eos = set(eos_token_ids) if eos_token_ids is not None else set(target.eos_token_ids)
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()
        self._held: dict[int, list[int]] = {}  # seq → the ids whose cells it holds (reused by the next request)
        self._auto: BatchGamma | None = None  # γ = auto's batch plan (kept across calls: what it measured holds)

    def close(self) -> None:
        self.context.close()
        close = getattr(self.factory, "close", None)
        if close is not None:
            close()

    def cancel(self, index: int) -> None:
        """Thread-safe: request ``index`` ends before the next step ("cancelled")."""
        with self._lock:
            self._cancelled.add(index)

    def _withdrawn(self, source: RequestQueue) -> list[int]:
        """Requests cancelled while they waited for a slot, taken out of ``source``."""
        with self._lock:
            if not self._cancelled:
                return []
            gone = source.withdraw(self._cancelled)
            self._cancelled.difference_update(gone)
            return gone

    def reset(self) -> None:
        """Forgets every cell (the next call reuses nothing: a benchmark's runs apart)."""
        for seq in range(self.n_seq):
            self.context.drop(seq)
        self._held.clear()

    def generate(self, requests: list[Request] | RequestQueue, admitted: Callable[[int], None] | None = None
                 ) -> Iterator[tuple[int, Step]]:
        """``requests``: a list (request i is its i-th) or a RequestQueue still being
        filled (request i is its i-th put); with nothing to decode, the loop waits for the
        queue's next request until the queue is closed. ``admitted(i)`` is called as request
        i takes a slot (a closed-loop client's send time: its time to first token counts
        from there)."""
        source = requests if isinstance(requests, RequestQueue) else RequestQueue(requests, closed=True)
        with self._lock:
            self._cancelled.clear()  # a cancel from an earlier call never reaches this one
        free = list(range(self.n_seq))[::-1]
        active: dict[int, _Slot] = {}
        room = self.context.n_ctx_per_seq
        try:
            while active or not source.finished:
                while free and (taken := source.take(0.0 if active else IDLE_WAIT_S)) is not None:
                    index, request = taken
                    if admitted is not None:
                        admitted(index)
                    # the free slot holding the longest prefix of this prompt (a shared system
                    # prompt, a repeated question): its cells are reused, the rest dropped
                    seq = max(free, key=lambda f: self._reusable(f, request.ids))
                    free.remove(seq)
                    proposer = self._proposer(seq)
                    seed = request.params.seed if request.params.seed is not None else random.getrandbits(63)
                    cached = self._reusable(seq, request.ids)
                    self.context.drop(seq, cached)
                    active[seq] = _Slot(index, request, list(request.ids), seed, torch.Generator().manual_seed(seed),
                                        proposer, make_controller(proposer), cached=cached)
                for index in self._withdrawn(source):  # cancelled while waiting: never admitted
                    yield index, epilogue.ended("cancelled")
                ended = [(s, "cancelled") for s, slot in active.items() if self._take_cancel(slot.index)]
                ended += [(s, "context" if len(slot.ids) >= room else "length") for s, slot in active.items()
                          if (len(slot.ids) >= room or slot.request.max_new_tokens <= 0) and (s, "cancelled") not in ended]
                for seq, reason in ended:
                    slot = active.pop(seq)
                    self._release(seq, slot, free)
                    yield slot.index, epilogue.ended(reason)
                if active:
                    yield from self._step(active, free, room)
        except GeneratorExit:  # abandoned between steps: its cells are ids[:cached], reusable
            for seq, slot in active.items():
                self._release(seq, slot, [])
            raise
        except BaseException:  # a failed decode leaves cells nobody can vouch for
            for seq in active:
                self.context.drop(seq)
                self._held.pop(seq, None)
            raise

    def _proposer(self, seq: int) -> Proposer | None:
        proposer = self.factory(self.lanes[seq])
        if proposer is None:
            return None
        proposer.place(self.target.device)
        proposer.vocab_size = self.target.vocab_size  # q is reported on the target's vocabulary
        if proposer.point_mass and proposer.num_speculative_tokens == "auto" and self._auto is None:
            self._auto = BatchGamma(proposer.max_speculative_tokens)
        return proposer

    def _reusable(self, seq: int, ids: list[int]) -> int:
        """How many of ``ids`` slot ``seq``'s cells hold already (the last id always runs:
        its logits draw the first token)."""
        held = self._held.get(seq, [])
        return min(common_prefix_length(held, ids), len(ids) - 1)

    def _release(self, seq: int, slot: _Slot, free: list[int]) -> None:
        """A finished sequence's slot goes back, its cells kept for a request that shares
        their prefix (between steps they hold exactly ids[:cached]: rejected drafts were
        dropped when verified)."""
        self._held[seq] = slot.ids[:slot.cached]
        free.append(seq)
        with self._lock:
            self._cancelled.discard(slot.index)  # a cancel that came too late is no one's (a server runs for days)

    def _take_cancel(self, index: int) -> bool:
        with self._lock:
            if index in self._cancelled:
                self._cancelled.discard(index)
                return True
            return False

    def _choose(self, active: dict[int, _Slot], room: int) -> tuple[list[int], BatchPlan | None]:
        """γ per sequence: γ = auto plans its sequences' drafts at once (batch_gamma.py); a
        fixed γ or plain decoding asks each sequence's own controller, beside it too (a
        request that asked for γ = 4 gets 4, whatever the others asked)."""
        slots = list(active.values())
        caps = [max(0, min(s.request.max_new_tokens - s.produced - 1, room - len(s.ids) - 1)) for s in slots]
        auto = [_planned(s) for s in slots]
        fixed = [0 if a or not s.proposer else min(s.controller.choose(s.ids)[0], cap)
                 for s, cap, a in zip(slots, caps, auto)]
        if self._auto is None or not any(auto):
            return fixed, None
        offers = [(s.proposer.candidates(s.ids, cap)[:1] or [None])[0] if a and cap else None
                  for s, cap, a in zip(slots, caps, auto)]
        # the fixed-γ sequences' drafts run anyway: to the plan they are rows like the pending ones
        plan = self._auto.plan(offers, sum(len(s.ids) - s.cached for s in slots) + sum(fixed))
        return [d if a else f for d, f, a in zip(plan.drafts, fixed, auto)], plan

    def _step(self, active: dict[int, _Slot], free: list[int], room: int) -> Iterator[tuple[int, Step]]:
        start = time.perf_counter()
        rows, plans = [], []
        gammas, batch_plan = self._choose(active, room)
        for (seq, slot), gamma in zip(active.items(), gammas):
            began = time.perf_counter()
            proposal = (slot.proposer.propose(slot.ids, gamma, slot.request.params, slot.generator) if gamma > 0
                        else Proposal(torch.empty(0, dtype=torch.long), None))
            if proposal.parents is not None and proposal.tokens.numel():
                raise ValueError(f"batched decoding verifies chains of drafts, not {slot.proposer.kind}'s tree")
            drafts = proposal.tokens.tolist()
            pending = slot.ids[slot.cached:]  # the last token emitted, or the prompt
            plans.append((seq, proposal, gamma, len(pending) - 1, len(rows), 1000 * (time.perf_counter() - began)))
            rows += [(t, slot.cached + i, seq, i == len(pending) - 1) for i, t in enumerate(pending)]
            rows += [(d, len(slot.ids) + j, seq, True) for j, d in enumerate(drafts)]
        drafted = time.perf_counter()
        logits = torch.from_numpy(self.context.decode_all(rows))
        features = self.context.features  # every row's layer inputs, where a head asked for them
        decoded = time.perf_counter()
        # a step that ran a prompt (any sequence's) says nothing of what verifying costs
        prompts = sum(plan[3] for plan in plans)
        at, out = 0, []
        for seq, proposal, gamma, prefill, first_row, draft_ms in plans:
            slot, k = active[seq], len(proposal.tokens)
            rows_here, at = logits[at:at + k + 1], at + k + 1
            if features is not None:  # the rows this sequence ran, from its first pending position
                lane = self.lanes[seq]
                lane.last_features = torch.from_numpy(features[first_row:first_row + prefill + 1 + k])
                lane.features_start = slot.cached
            r = slot.request
            result = verify_chain(rows_here, proposal, r.params, slot.generator, slot.seed, len(slot.ids))
            if result.nonfinite:
                raise epilogue.nonfinite(result.nonfinite, f"for request {slot.index}")
            source = (proposal.source or slot.proposer.kind) if k else ""
            if slot.proposer:
                slot.proposer.observe(result.num_accepted)
            n = result.num_accepted
            if n < k:
                self.context.drop(seq, len(slot.ids) + n)  # the rejected drafts' cells, this sequence's only
            slot.cached = len(slot.ids) + n
            settled = epilogue.settle(slot.ids, result.tokens, slot.produced, stops=set(r.stop_token_ids),
                                      eos=self.eos, max_new_tokens=r.max_new_tokens, max_length=room)
            slot.produced += len(settled.tokens)
            out.append((seq, slot, settled, gamma, proposal, result, source, draft_ms))
        end = time.perf_counter()  # one time for the whole step, before anything is handed out
        if batch_plan is not None:
            self._auto.observe(len(rows), 1000 * (end - drafted), 1000 * (drafted - start), prompts > 0,
                               [(len(o[4].tokens), o[5].num_accepted) if d else (0, 0)
                                for o, d in zip(out, batch_plan.drafts)])
        for i, (seq, slot, settled, gamma, proposal, result, source, draft_ms) in enumerate(out):
            planned = batch_plan is not None and _planned(slot)
            if not planned:
                assessed = slot.controller.assess(len(proposal.tokens), source)
                gain, marginal = None, None
            else:
                gamma_r, gain_r = self._auto.recommendation()
                assessed = Assessment(batch_plan.tokens[i], batch_plan.cost, gamma_r, gain_r)
                gain, marginal = batch_plan.gain, batch_plan.marginal_ms
            # each sequence drafted on its own (its own time); the decode and the step are shared
            stats = epilogue.stats(
                gamma, len(proposal.tokens), result.num_accepted, result.alpha_sum, assessed,
                draft_forwards=proposal.forwards, draft_catch_up_tokens=proposal.catch_up_tokens,
                draft_ms=draft_ms, verify_ms=1000 * (decoded - drafted),
                total_ms=1000 * (end - start), prefill_tokens=prompts,
                predicted_gain=gain, draft_source=source, batch_size=len(plans), marginal_ms=marginal)
            if not planned:
                slot.controller.observe(stats, proposal)
            if settled.finish:
                del active[seq]
                self._release(seq, slot, free)
            yield slot.index, Step(tuple(settled.tokens), stats, settled.finish)


def _planned(slot: _Slot) -> bool:
    """Whether γ = auto's batch plan chooses this sequence's drafts (point masses: their cost
    is the rows they add), else its own controller (a model's drafts cost its forwards)."""
    return slot.proposer is not None and slot.proposer.point_mass and slot.proposer.num_speculative_tokens == "auto"
