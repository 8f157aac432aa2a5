"""Seeded samples in batches: a case's N seeds are N sequences of one batch, decoded by the
engine's own ``step`` (engine.py), each with its own generator (seeded by its index, as
``generate`` with that seed would be), proposer and controller.

Each sequence reads the target through its own lane (table_lm.ContextLM.lane()): the id
bookkeeping of a cached backend over laws the lanes share, so a step's new contexts are
computed together (vocab16.ModelLM: one forward per context length) instead of one
sequence at a time. Where the target is a float64 transformers model, the first SHADOWED
sequences also run on the real transformers backend (its KV cache, rollback, tree mask)
and every step's logits there must equal the lane's: a cache bug fails exactly, not
statistically.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
import torch

from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.engine import _Alone, Sequence, _Verified, admit, step
from specchat.engine.gamma.controller import Assessment, Controller, make_controller
from specchat.engine.proposers import Proposal, Proposer
from specchat.engine.sampling import SamplingParams
from specchat.telemetry import MetricsSnapshot, Telemetry
from tests.support.table_lm import ContextLM

SHADOWED = 24  # sequences of a case that the real backend runs too
BATCH = 500  # sequences a batch: their lanes and proposers serve batch after batch
WARM = 1 << 40  # the seeds of a new lane's throwaway first sequence (never a counted one's)
CPU = torch.device("cpu")


@dataclasses.dataclass(frozen=True)
class Case:
    """What a case samples: ``target`` (its laws), each sequence's proposer over its lane
    of the target (None: plain decoding) and its controller (None: the proposer's
    default); ``shadow``: the transformers model behind ``target``, run for real beside it;
    ``batch``: the most seeds a batch holds (a controller the batch shares learns between
    batches, as it learnt between seeds run one by one; None: BATCH)."""

    target: ContextLM
    proposer: Callable[[ContextLM], Proposer | None] = lambda lane: None
    controller: Callable[[Proposer | None], Controller] | None = None
    shadow: torch.nn.Module | None = None
    batch: int | None = None


@dataclasses.dataclass
class Sampled:
    counts: dict[tuple, int] = dataclasses.field(default_factory=dict)  # continuation → how many seeds gave it
    sources: dict[str, int] = dataclasses.field(default_factory=dict)  # drafting steps by the source that drafted
    telemetry: Telemetry = dataclasses.field(default_factory=Telemetry)  # every step of every sequence
    pool: list = dataclasses.field(default_factory=list, repr=False)  # (lane, proposer) per sequence of a batch

    @property
    def metrics(self) -> MetricsSnapshot:
        return self.telemetry.snapshot()


class _Lanes:
    """The runner: each sequence's target pass on its lane, the step's new laws first."""

    device = CPU

    def __init__(self, target: ContextLM, lanes: list[ContextLM], shadows: dict[int, TransformersBackend]) -> None:
        self.target = target
        self.alone = [_Alone(lane, None) for lane in lanes]
        self.shadows = {i: _Alone(backend, None) for i, backend in shadows.items()}

    def decode(self, seqs: list[Sequence], proposals: list[Proposal]) -> list[torch.Tensor]:
        contexts = []
        for s, proposal in zip(seqs, proposals):
            tokens = proposal.tokens.tolist()
            if proposal.parents is None:
                run = s.ids + tokens
                contexts += [tuple(run[:i + 1]) for i in range(s.cached, len(run))]
            else:
                paths: list[list[int]] = []
                for token, parent in zip(tokens, proposal.parents):
                    paths.append((paths[parent] if parent >= 0 else []) + [token])
                contexts += [tuple(s.ids[:i + 1]) for i in range(s.cached, len(s.ids))]
                contexts += [tuple(s.ids + path) for path in paths]
        self.target.prefetch(contexts)
        out = []
        for s, proposal in zip(seqs, proposals):
            (logits,) = self.alone[s.lane].decode([s], [proposal])
            if s.lane in self.shadows:
                (real,) = self.shadows[s.lane].decode([s], [proposal])
                torch.testing.assert_close(real, logits, rtol=0, atol=1e-9,
                                           msg=lambda m: f"the transformers backend, sequence {s.lane}: {m}")
            out.append(logits)
        return out

    def rollback(self, seq: Sequence, proposal: Proposal, result: _Verified) -> None:
        self.alone[seq.lane].rollback(seq, proposal, result)
        if seq.lane in self.shadows:
            self.shadows[seq.lane].rollback(seq, proposal, result)

    def cpu_others(self) -> float | None:
        return None


class Bound(Controller):
    """One sequence's view of a controller the batch shares (``shared(controller)``): its
    proposer and acceptance key are bound in for each call, so the shared one learns from
    every sequence's past, as it did from every earlier seed's when seeds ran one by one.
    Exact all the same: a sequence's γ depends on past steps only (its own and others',
    which are independent of its future draws)."""

    def __init__(self, controller: Controller, proposer: Proposer | None) -> None:
        self.shared, self.proposer, self._key = controller, proposer, controller._key

    def _bind(self) -> None:
        self.shared.proposer, self.shared._key = self.proposer, self._key

    def start_turn(self) -> None:
        self.shared.start_turn()

    def choose(self, ids):
        self._bind()
        chosen = self.shared.choose(ids)
        self._key = self.shared._key
        return chosen

    def observe(self, stats, proposal) -> None:
        self._bind()
        self.shared.observe(stats, proposal)

    def prefills_proposer(self) -> bool:
        self._bind()
        return self.shared.prefills_proposer()


def shared(controller: Controller) -> Callable[[Proposer | None], Controller]:
    return lambda proposer: Bound(controller, proposer)


def _open(case: Case, lane: ContextLM, proposer: Proposer | None, index: int, seed: int, prompt: list[int],
          params: SamplingParams, length: int) -> Sequence:
    """Sequence ``index`` as SpeculativeEngine.generate opens one (its proposer placed and
    prefilled), its controller answering no forecasts: no check reads one, and refitting
    the cost model for them was 10-18 % of a sample."""
    controller = case.controller(proposer) if case.controller else make_controller(proposer)
    controller.assess = lambda k, source: Assessment()
    return admit(prompt, dataclasses.replace(params, seed=seed), proposer, controller, CPU,
                 max_new_tokens=length, stops=(), eos=(), max_length=lane.max_length, index=index, lane=index)


def _lanes(case: Case, out: Sampled, n: int, prompt: list[int], params: SamplingParams):
    """``n`` (lane, proposer) pairs: the pool's, more made where it is short. As with seeds
    run one by one through ``generate``, a lane and its proposer go on from the last
    sequence they decoded (a head holds the prompt's features from it): a new pair first
    decodes one throwaway token after the prompt."""
    made = []
    while len(out.pool) < n:
        lane = case.target.lane()
        proposer = case.proposer(lane)
        if proposer is not None:
            proposer.place(CPU)
            proposer.vocab_size = lane.vocab_size  # q is reported on the target's vocabulary
        made.append((lane, proposer))
        out.pool.append(made[-1])
    if made:
        _decode(case, made, prompt, params, range(WARM, WARM + len(made)), 1, Sampled())
    return out.pool[:n]


def sample(case: Case, prompt: list[int], params: SamplingParams, seeds: range, length: int,
           into: Sampled | None = None) -> Sampled:
    """Counts of the seeded ``length``-token continuations (seed i: the i-th sequence),
    added ``into`` an earlier batch's where given."""
    out = into or Sampled()
    size = case.batch or BATCH
    for start in range(0, len(seeds), size):
        _batch(case, prompt, params, seeds[start:start + size], length, out)
    return out


def _batch(case: Case, prompt: list[int], params: SamplingParams, seeds: range, length: int, out: Sampled) -> None:
    pairs = _lanes(case, out, len(seeds), prompt, params)
    if out.telemetry.num_steps == 0 and pairs[0][1] is not None:  # its histogram as wide as γ's ceiling
        out.telemetry = Telemetry(max_gamma=pairs[0][1].max_speculative_tokens)
    _decode(case, pairs, prompt, params, seeds, length, out)


@torch.inference_mode()
def _decode(case: Case, pairs: list, prompt: list[int], params: SamplingParams, seeds: range, length: int,
            out: Sampled) -> None:
    """Decodes seed i's sequence on the i-th pair, its steps folded and its continuation counted ``into``."""
    seqs = [_open(case, lane, proposer, i, seed, prompt, params, length)
            for i, ((lane, proposer), seed) in enumerate(zip(pairs, seeds))]
    real = case.shadow is not None and next(case.shadow.parameters()).dtype == torch.float64
    shadows = {i: TransformersBackend(case.shadow) for i, seed in enumerate(seeds) if real and seed < SHADOWED}
    runner = _Lanes(case.target, [lane for lane, _ in pairs], shadows)
    active = seqs
    while active:
        finished = set()
        for s, done in step(active, runner):
            out.telemetry.update(done.stats, len(done.tokens))
            if done.stats.num_draft_tokens:
                out.sources[done.stats.draft_source] = out.sources.get(done.stats.draft_source, 0) + 1
            if done.finish_reason:
                assert done.finish_reason == "length", done.finish_reason
                finished.add(s.lane)
        active = [s for s in active if s.lane not in finished]
    for s in seqs:
        seq = tuple(s.ids[len(prompt):])
        assert len(seq) == length
        out.counts[seq] = out.counts.get(seq, 0) + 1


def growing(case: Case, prompt: list[int], params: SamplingParams, samples: int, length: int,
            looks: list[int]) -> Iterator[tuple[int, Sampled]]:
    """(n, the samples of seeds 0..n−1) at each n of ``looks`` (ascending, the last
    ``samples``): each batch only the seeds since the last look."""
    out, start = None, 0
    for n in looks:
        out = sample(case, prompt, params, range(start, n), length, out)
        start = n
        yield n, out
