"""Several replies decoded together, exactly: the engine's one ``step`` over every active
sequence, as one ``llama_decode``; a rejected draft's cells are dropped from its sequence
alone, and a finished sequence frees its slot at once (continuous batching). Chains only.
Design notes: docs/design/batching.md
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

import torch

from specchat.engine.backends.base import Backend
from specchat.engine.batch.requests import Request, RequestQueue
from specchat.engine.engine import EACH_OWN, Sequence, _Verified, admit, refused, reusable, step
from specchat.engine import epilogue
from specchat.engine.gamma.batch_plan import BatchGamma
from specchat.engine.gamma.controller import Controller, make_controller
from specchat.engine.proposers import Proposal, Proposer
from specchat.events import Step

IDLE_WAIT_S = 0.1  # with nothing to decode, how long one wait for a request lasts (a closed queue ends it sooner)
__all__ = ["BatchedEngine", "Request", "RequestQueue"]  # Request for the callers that build them


class _Together:
    """The runner of a batched step: one decode of every sequence's rows in the context."""

    device = torch.device("cpu")

    def __init__(self, context, lanes: list[Backend]) -> None:
        self.context, self.lanes = context, lanes

    def decode(self, seqs: list[Sequence], proposals: list[Proposal]) -> list[torch.Tensor]:
        rows, firsts = [], []
        for s, proposal in zip(seqs, proposals):
            if proposal.parents is not None and proposal.tokens.numel():
                raise ValueError(f"batched decoding verifies chains of drafts, not {s.proposer.kind}'s tree")
            pending = s.ids[s.cached:]  # the last token emitted, or the prompt
            firsts.append(len(rows))
            rows += [(t, s.cached + i, s.lane, i == len(pending) - 1) for i, t in enumerate(pending)]
            rows += [(d, len(s.ids) + j, s.lane, True) for j, d in enumerate(proposal.tokens.tolist())]
        logits = torch.from_numpy(self.context.decode_all(rows))
        features = self.context.features  # every row's layer inputs, where a head asked for them
        out, at = [], 0
        for s, proposal, first in zip(seqs, proposals, firsts):
            k = len(proposal.tokens)
            out.append(logits[at:at + k + 1])
            at += k + 1
            if features is not None:  # the rows this sequence ran, from its first pending position
                lane = self.lanes[s.lane]
                lane.last_features = torch.from_numpy(features[first:first + len(s.ids) - s.cached + k])
                lane.features_start = s.cached
        return out

    def rollback(self, seq: Sequence, proposal: Proposal, result: _Verified) -> None:
        if result.num_accepted < len(proposal.tokens):
            self.context.drop(seq.lane, len(seq.ids) + result.num_accepted)  # this sequence's cells only

    def cpu_others(self) -> float | None:
        return None


class BatchedEngine:
    """``generate(requests)`` yields (request index, Step) as the batch advances.
    ``proposer_factory(lane)`` gives each request its own proposer (None: plain decoding)
    over ``lane``, its sequence as a Backend (a factory's ``close()`` runs with the engine's)."""

    def __init__(self, target, n_seq: int = 4, proposer_factory: Callable[[Backend], Proposer | None] | None = None,
                 eos_token_ids: Iterable[int] | None = None, n_ctx_per_seq: int | None = None) -> None:
        if not target.batches:
            raise ValueError(f"batched decoding needs a backend that batches: {target.batch_note} (the "
                             f"{target.name} backend); the llama.cpp backend does")
        self.target, self.n_seq = target, n_seq
        self.context = target.open_batch(n_seq, n_ctx_per_seq or max(256, target.max_length // n_seq))
        self.lanes = [self.context.lane(seq) for seq in range(n_seq)]
        self.runner = _Together(self.context, self.lanes)
        self.factory = proposer_factory or (lambda lane: None)
        self.eos = set(eos_token_ids) if eos_token_ids is not None else set(target.eos_token_ids)
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()
        self._held: dict[int, list[int]] = {}  # seq → the ids whose cells it holds (reused by the next request)
        self._gamma = EACH_OWN  # γ = auto's batch plan once a proposer asks (kept across calls: its measures hold)
        self._controllers: dict[int, tuple[Proposer | None, Controller]] = {}  # seq → its proposer's controller

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
        self._held.clear()  # what γ = auto measured stays, the batch plan's and the lanes' alike

    def generate(self, requests: list[Request] | RequestQueue, admitted: Callable[[int], None] | None = None,
                 failed: Callable[[int, Exception], None] | None = None) -> Iterator[tuple[int, Step]]:
        """``requests``: a list or a RequestQueue still being filled (request i is its i-th).
        ``admitted(i)``: request i takes a slot (its time to first token counts from there).
        ``failed(i, error)``: request i's verification failed, its last Step says "error"
        and the rest go on; without it, such an error ends the call."""
        alone = None if failed is None else (lambda s, exc: failed(s.index, exc))
        source = requests if isinstance(requests, RequestQueue) else RequestQueue(requests, closed=True)
        with self._lock:
            self._cancelled.clear()  # a cancel from an earlier call never reaches this one
        free = list(range(self.n_seq))[::-1]
        active: dict[int, Sequence] = {}
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
                    active[seq] = self._admit(index, request, seq, room)
                for index in self._withdrawn(source):  # cancelled while waiting: never admitted
                    yield index, epilogue.ended("cancelled")
                ended = [(q, "cancelled") for q, s in active.items() if self._take_cancel(s.index)]
                ended += [(q, why) for q, s in active.items() if (q, "cancelled") not in ended
                          and (why := refused(s.ids, s.max_new_tokens, room))]
                for seq, reason in ended:
                    s = active.pop(seq)
                    self._release(s, free)
                    yield s.index, epilogue.ended(reason)
                if active:
                    for s, done in step(list(active.values()), self.runner, self._gamma, alone):
                        if done.finish_reason == "error":  # its cells hold an unverified step: gone
                            self.context.drop(s.lane)
                            s.ids, s.cached = [], 0
                        if done.finish_reason:
                            del active[s.lane]
                            self._release(s, free)
                        yield s.index, done
        except GeneratorExit:  # abandoned between steps: its cells are ids[:cached], reusable
            for s in active.values():
                self._release(s, [])
            raise
        except BaseException:  # a failed decode leaves cells nobody can vouch for
            for seq in active:
                self.context.drop(seq)
                self._held.pop(seq, None)
            raise

    def _admit(self, index: int, request: Request, seq: int, room: int) -> Sequence:
        proposer = self._proposer(seq)
        # a lane's proposer serves request after request: so does its controller, whose
        # measured costs and acceptance hold across them (as across a chat's turns alone)
        made = self._controllers.get(seq)
        if made is not None and proposer is not None and made[0] is proposer:
            controller = made[1]
        else:
            controller = make_controller(proposer)
            self._controllers[seq] = (proposer, controller)
        held = self._held.get(seq, [])
        self.context.drop(seq, reusable(held, request.ids))
        s = admit(request.ids, request.params, proposer, controller, self.target.device, held=held,
                  max_new_tokens=request.max_new_tokens, stops=request.stop_token_ids, eos=self.eos,
                  max_length=room, index=index, lane=seq)
        s.name = f"request {index}"
        return s

    def _proposer(self, seq: int) -> Proposer | None:
        proposer = self.factory(self.lanes[seq])
        if proposer is None:
            return None
        proposer.place(self.target.device)
        proposer.vocab_size = self.target.vocab_size  # q is reported on the target's vocabulary
        if proposer.point_mass and proposer.num_speculative_tokens == "auto" and self._gamma is EACH_OWN:
            self._gamma = BatchGamma(proposer.max_speculative_tokens)
        return proposer

    def _reusable(self, seq: int, ids: list[int]) -> int:
        return reusable(self._held.get(seq, []), ids)

    def _release(self, s: Sequence, free: list[int]) -> None:
        """A finished sequence's slot goes back, its cells (between steps exactly ids[:cached])
        kept for a request that shares their prefix."""
        self._held[s.lane] = s.ids[:s.cached]
        free.append(s.lane)
        with self._lock:
            self._cancelled.discard(s.index)  # a cancel that came too late is no one's (a server runs for days)

    def _take_cancel(self, index: int) -> bool:
        with self._lock:
            taken = index in self._cancelled
            self._cancelled.discard(index)
            return taken
