"""The speculative step for a batch of sequences: propose → one target pass (a :class:`Runner`)
→ verify (accept, resample or bonus) → roll back → emit. One sequence is a batch of one
(:class:`SpeculativeEngine`); batch/batched.py runs ``step`` over a llama.cpp context.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specchat.engine import epilogue  # looked up at call time: tests plant bugs there
from specchat.engine.backends import Backend, as_backend, common_prefix_length
from specchat.engine.gamma.batch_plan import BatchGamma
from specchat.engine.gamma.controller import Controller, make_controller
from specchat.engine.host_sampling import verify_point_mass
from specchat.engine.proposers import Proposal, Proposer
from specchat.engine.sampling import SamplingParams, nonfinite_rows, position_uniforms, rejection_sample, topk, warp
from specchat.engine.timing import StepTimer
from specchat.engine.trees.walk import walk
from specchat.contention import CpuShare
from specchat.errors import GenerationError
from specchat.events import Alternative, Step, Token

NUM_ALTERNATIVES = 5
# point-mass steps whose logits are in host memory are verified in numpy (host_sampling.py);
# False sends them through the torch sampler too (tests compare the two)
HOST_SAMPLING = True
NO_DRAFTS = Proposal(torch.empty(0, dtype=torch.long), None)


@dataclass
class _Verified:
    tokens: list[Token]
    num_accepted: int
    alpha_sum: float
    nonfinite: str | None = None  # "target" / "draft": whose logits were NaN or infinite
    alpha_count: int | None = None  # verified positions behind alpha_sum (None: min(k, n + 1))
    positions: int | None = None  # a tree's positions judged on the kept path (None: a chain's)
    path: list[int] | None = None  # a tree's kept nodes, root down (None: a chain)


@dataclass
class Sequence:
    """One reply being decoded: its ids so far (prompt and reply), how it samples and
    stops, its draws and its own proposer and controller."""

    ids: list[int]
    params: SamplingParams
    max_new_tokens: int
    stops: set[int]
    eos: set[int]
    max_length: int  # the context the sequence may fill
    seed: int  # also keys the per-position draws (sampling.position_uniforms)
    generator: torch.Generator  # the rejection sampler's draws, on the target's device
    draft_generator: torch.Generator  # the proposer's (the same one where both share a device)
    proposer: Proposer | None
    controller: Controller
    cached: int = 0  # ids the target's cache holds: the rest (the last token, or the prompt) runs next
    produced: int = 0  # tokens emitted so far
    steps: int = 0
    index: int = 0  # the request's number (a batch's)
    lane: int = 0  # the target sequence it decodes in (a batch's seq_id)
    name: str = "this reply"  # what an error calls it ("request 3" in a batch)
    first: dict = field(default_factory=dict)  # StepStats only the first step carries (prefill)

    def cap(self) -> int:
        """The most drafts the next step may verify (room for them and one more token)."""
        return max(0, min(self.max_new_tokens - self.produced - 1, self.max_length - len(self.ids) - 1))


def admit(ids: list[int], params: SamplingParams, proposer: Proposer | None, controller: Controller,
          device: torch.device, *, held: list[int] = (), max_new_tokens: int, stops: Iterable[int],
          eos: Iterable[int], max_length: int, index: int = 0, lane: int = 0) -> Sequence:
    """A reply's sequence, set up the one way for a batch of one or of many: its controller's
    turn begun, the cells it reuses (``reusable`` of what its cache ``held``), its proposer run
    over the prompt where the controller asks, and that time and reuse carried by its first step.
    The target's prefill is folded into the first step's pass (one pass over the prompt and the
    first drafts); that step's times are then not verification timings (StepStats.prefill_tokens)."""
    watch = StepTimer(device)
    controller.start_turn()
    seed = params.seed if params.seed is not None else random.SystemRandom().getrandbits(63)
    generator = generator_on(device, seed)
    reused = reusable(held, ids)
    s = Sequence(list(ids), params, max_new_tokens, set(stops), set(eos), max_length, seed, generator,
                 draft_generator(proposer, generator, seed, device), proposer, controller, cached=reused,
                 index=index, lane=lane)
    if proposer is not None and controller.prefills_proposer():
        proposer.prefill(s.ids)
    s.first = {"prefill_ms": watch.ms(0, watch.mark()), "reused_tokens": reused}
    return s


def reusable(held: list[int], ids: list[int]) -> int:
    """How many of ``ids`` a cache holding ``held`` keeps: their common prefix, less the last
    id, which always runs (its logits draw the first token)."""
    return min(common_prefix_length(held, ids), len(ids) - 1)


def refused(ids: list[int], max_new_tokens: int, max_length: int) -> str | None:
    """Why a reply ends before its first step ("length", "context"), or None."""
    return "length" if max_new_tokens <= 0 else "context" if len(ids) >= max_length else None


class Runner(Protocol):
    """Runs a step's target pass: every sequence's pending tokens and drafts at once."""

    device: torch.device

    def decode(self, seqs: list[Sequence], proposals: list[Proposal]) -> list[torch.Tensor]:
        """Each sequence's logits: [k+1, V] at its last token and k drafts ([N+1, V] for a tree)."""

    def rollback(self, seq: Sequence, proposal: Proposal, result: _Verified) -> None:
        """The cache drops what verification rejected (a chain's tail, a tree's other branches)."""

    def cpu_others(self) -> float | None:
        """Other processes' share of the cores since the last step (None: not read)."""


EACH_OWN = BatchGamma(0)  # plans nothing (each sequence's own controller chooses), so it keeps no state to share


def step(seqs: list[Sequence], runner: Runner, gamma: BatchGamma = EACH_OWN,
         alone: Callable[[Sequence, Exception], None] | None = None) -> list[tuple[Sequence, Step]]:
    """One speculative step for every sequence in ``seqs`` → each sequence's Step.
    ``gamma`` chooses, assesses and observes every sequence's drafts. ``alone``: where one
    sequence's verification fails, it gets the sequence and the error, and that sequence's
    Step ends it ("error") while the others go on; None: the error ends the step."""
    timer = StepTimer(runner.device)  # the step's own time, not the consumer's
    contexts = [len(s.ids) for s in seqs]
    plan = gamma.choose(seqs)
    # alone, choosing γ is part of the sequence's drafting (as it always was); in a batch the
    # choices are no one sequence's, and each draft time is its proposer's alone
    proposals, marks = [], [0 if len(seqs) == 1 else timer.mark()]
    for s, k in zip(seqs, plan.drafts):
        proposals.append(s.proposer.propose(s.ids, k, s.params, s.draft_generator) if k > 0 else NO_DRAFTS)
        marks.append(timer.mark())
    # a step that ran a prompt (any sequence's) says nothing of what verifying costs
    prompts = sum(len(s.ids) - s.cached - 1 for s in seqs)
    rows = sum(len(s.ids) - s.cached + len(p.tokens) for s, p in zip(seqs, proposals))
    logits = runner.decode(seqs, proposals)
    decoded = timer.mark()
    verdicts = []
    for s, proposal, here in zip(seqs, proposals, logits):
        try:
            result = verify(here, proposal, s)
            if result.nonfinite:
                raise epilogue.nonfinite(result.nonfinite, f"at step {s.steps + 1} of {s.name}, before its token "
                                                           f"{s.produced + 1}")
        except Exception as exc:
            if alone is None:
                raise
            alone(s, exc)
            verdicts.append(None)
            continue
        runner.rollback(s, proposal, result)
        s.cached = len(s.ids) + result.num_accepted  # the emitted token's cells come with the next step
        if s.proposer:
            s.proposer.observe(result.num_accepted)
        settled = epilogue.settle(s.ids, result.tokens, s.produced, stops=s.stops, eos=s.eos,
                                  max_new_tokens=s.max_new_tokens, max_length=s.max_length)
        s.produced += len(settled.tokens)
        s.steps += 1
        verdicts.append((proposal, result, settled))
    end = timer.mark()  # one time for the whole step, before anything is handed out
    others, out, done = runner.cpu_others(), [], []
    for i, (s, verdict) in enumerate(zip(seqs, verdicts)):
        if verdict is None:  # failed alone (handed to ``alone``)
            out.append((s, epilogue.ended("error")))
            done.append(None)
            continue
        proposal, result, settled = verdict
        k = len(proposal.tokens)
        source = (proposal.source or s.proposer.kind) if k else ""
        assessed, gain, marginal = gamma.assess(plan, i, s, k, source)
        # each sequence drafted on its own (its own time); the target's pass and the step are shared
        stats = epilogue.stats(
            plan.drafts[i], k, result.num_accepted, result.alpha_sum, assessed, alpha_count=result.alpha_count,
            draft_forwards=proposal.forwards, draft_catch_up_tokens=proposal.catch_up_tokens,
            verified_positions=result.positions, draft_ms=timer.ms(marks[i], marks[i + 1]),
            verify_ms=timer.ms(decoded - 1, decoded), total_ms=timer.ms(0, end), prefill_tokens=prompts,
            predicted_gain=gain, draft_source=source, batch_size=len(seqs), marginal_ms=marginal,
            cpu_others=others, context_tokens=contexts[i], **s.first)
        s.first = {}
        done.append((stats, proposal))
        out.append((s, Step(tuple(settled.tokens), stats, settled.finish)))
    gamma.observe(plan, seqs, done, rows, timer.ms(decoded - 1, end), timer.ms(0, decoded - 1), prompts > 0)
    return out


def verify(logits: torch.Tensor, proposal: Proposal, s: Sequence) -> _Verified:
    if proposal.parents is not None and proposal.tokens.numel():
        return verify_tree(logits, proposal, s.params, s.generator)
    return verify_chain(logits, proposal, s.params, s.generator, s.seed, len(s.ids))


class _Alone:
    """The runner of a batch of one: the backend's own cache, keyed by the ids it holds
    (a rejected chain's tail is dropped at the next call)."""

    def __init__(self, target: Backend, cpu_share: CpuShare) -> None:
        self.target, self.device, self.share = target, target.device, cpu_share

    def decode(self, seqs: list[Sequence], proposals: list[Proposal]) -> list[torch.Tensor]:
        (s,), (proposal,) = seqs, proposals
        if proposal.parents is not None and proposal.tokens.numel():
            return [self.target.forward_tree(s.ids, proposal.tokens.tolist(), proposal.parents)]  # [N+1, V]
        drafts = proposal.tokens.to(self.device)  # [k]
        return [self.target.forward(s.ids, extra=drafts, num_logits=drafts.numel() + 1)]  # [k+1, V]

    def rollback(self, seq: Sequence, proposal: Proposal, result: _Verified) -> None:
        if result.path is not None:
            self.target.keep_path(result.path)  # a tree: the cache keeps the walked path only

    def cpu_others(self) -> float | None:
        return self.share.take()


class SpeculativeEngine:
    """Exact speculative decoding of one sequence: ``step`` over a batch of one.

    ``target``: a Backend or a transformers causal LM. ``proposer=None`` is plain decoding
    through the same path; so is a proposer whose model cannot roll back (``notice`` says
    why). ``generate`` yields a Step per round; the consumer folds them into telemetry.
    """

    def __init__(self, target: Backend | torch.nn.Module, proposer: Proposer | None = None, *,
                 controller: Controller | None = None, eos_token_ids: Iterable[int] | None = None,
                 cpu_share: CpuShare | None = None) -> None:
        self.target = as_backend(target)
        self.device = self.target.device
        self.notice: str | None = None
        if proposer is not None and not (self.target.can_rollback and proposer.can_rollback):
            which = "target" if not self.target.can_rollback else "draft model"
            self.notice = (f"speculation off: the {which}'s cache cannot roll back rejected drafts "
                           f"(recurrent state), so this model decodes plainly")
            proposer = None
        self.proposer = proposer
        if proposer is not None:
            proposer.place(self.device)
            proposer.vocab_size = self.target.vocab_size  # q is reported on the target's vocabulary
        self.eos_token_ids = set(eos_token_ids) if eos_token_ids is not None else set(self.target.eos_token_ids)
        self.controller = controller or make_controller(proposer)
        self._cancel = threading.Event()
        self.cpu_share = cpu_share or CpuShare()  # other processes' share of the cores, per step

    def cancel(self) -> None:
        """Thread-safe: the running ``generate`` stops before its next step."""
        self._cancel.set()

    def reset(self) -> None:
        """Drops cached KV state (a new chat)."""
        self.target.reset()
        if self.proposer:
            self.proposer.reset()

    def generate(self, input_ids: Iterable[int] | torch.Tensor, params: SamplingParams = SamplingParams(),
                 max_new_tokens: int = 256, stop_token_ids: Iterable[int] = ()) -> Iterator[Step]:
        ids = input_ids.tolist() if isinstance(input_ids, torch.Tensor) else list(input_ids)
        if not ids:
            raise ValueError("input_ids is empty: give at least one token")
        self._cancel.clear()
        with torch.inference_mode():
            yield from self._generate(ids, params, max_new_tokens, stop_token_ids)

    def _generate(self, ids: list[int], params: SamplingParams, max_new_tokens: int,
                  stops: Iterable[int]) -> Iterator[Step]:
        self.cpu_share.take(fresh=True)  # the first step's share starts here
        if (reason := refused(ids, max_new_tokens, self.target.max_length)) is not None:
            yield epilogue.ended(reason)
            return
        seq = admit(ids, params, self.proposer, self.controller, self.device, held=self.target.ids,
                    max_new_tokens=max_new_tokens, stops=stops, eos=self.eos_token_ids,
                    max_length=self.target.max_length)
        runner = _Alone(self.target, self.cpu_share)
        while not self._cancel.is_set():
            seq.controller = self.controller  # γ set mid-reply (ChatSession) takes effect at the next step
            try:
                ((_, done),) = step([seq], runner)
            except GenerationError:
                self.reset()  # KV computed alongside NaNs is not reused
                raise
            yield done
            if done.finish_reason:
                return
        yield epilogue.ended("cancelled")


def draft_generator(proposer: Proposer | None, generator: torch.Generator, seed: int,
                    device: torch.device) -> torch.Generator:
    """The generator the proposer draws with: the target's, or, for a draft model on another
    device (a torch generator draws only on its own), one seeded from the turn's seed."""
    where = proposer.sampling_device if proposer is not None else None
    if where is None or same_device(torch.device(where), device):
        return generator
    # an LCG step of the seed: a stream of its own, fixed by the seed
    return generator_on(torch.device(where), (seed * 6364136223846793005 + 1442695040888963407) % 2**64)


def verify_tree(logits: torch.Tensor, proposal: Proposal, params: SamplingParams,
                generator: torch.Generator) -> _Verified:
    """The target's logits [N+1, V] at a tree of drafts, walked by recursive rejection
    sampling (trees/walk.py); the runner then keeps the walked path only."""
    tokens = proposal.tokens.tolist()
    if bool(nonfinite_rows(logits).any()):
        return _Verified([], 0, 0.0, "target")
    p = warp(logits, params).double()
    q = proposal.q.to(logits.device) if proposal.q is not None else None
    verdict = walk(p, tokens, proposal.parents, q, generator, greedy=params.greedy)
    rows = [0] + [c + 1 for c in verdict.path]  # p's row at each emitted token
    top_p, top_ids = topk(p[rows], min(NUM_ALTERNATIVES, p.shape[-1]))
    alts = [tuple(Alternative(id=int(a), p=float(b)) for a, b in zip(i, v) if b > 0)
            for i, v in zip(top_ids.tolist(), top_p.tolist())]
    out = [Token(id=tokens[c], kind="accepted", p=verdict.p_kept[j], q=verdict.q_kept[j], alternatives=alts[j],
                 source=proposal.source) for j, c in enumerate(verdict.path)]
    n = len(out)
    if verdict.bonus:
        out.append(Token(id=verdict.next_token, kind="bonus", p=verdict.p_next, alternatives=alts[n]))
    else:
        rejected_id, rejected_p, rejected_q = verdict.rejected
        out.append(Token(id=verdict.next_token, kind="resampled", p=verdict.p_next, alternatives=alts[n],
                         rejected_id=rejected_id, rejected_p=rejected_p, rejected_q=rejected_q,
                         source=proposal.source))
    # α is a chain's figure: no sample from a tree; a walk that ended at a leaf judged no
    # position past its path, one that ended on a rejection judged one more
    return _Verified(out, n, 0.0, alpha_count=0, positions=n + (0 if verdict.bonus else 1), path=verdict.path)


@dataclass
class _Read:
    """One verification read back to the host: per draft ``accepted``, ``p_draft``,
    ``q_draft``, ``alpha`` (Σ min(p, q)) and ``drafts``; per position (k+1) the candidate
    next token, its p and the alternatives."""

    accepted: list[bool]
    next_tokens: list[int]
    p_next: list[float]
    p_draft: list[float]
    q_draft: list[float]
    alpha: list[float]
    alternatives: list[tuple[Alternative, ...]]
    drafts: list[int]
    nonfinite: str | None = None  # "target" / "draft": whose logits were NaN or infinite

    @classmethod
    def failed(cls, whose: str) -> _Read:
        return cls([], [], [], [], [], [], [], [], nonfinite=whose)


def verify_chain(logits: torch.Tensor, proposal: Proposal, params: SamplingParams, generator: torch.Generator,
                 seed: int, start: int) -> _Verified:
    """The target's logits [k+1, V] at a chain of k drafts after ``start`` ids → the tokens
    it emits. One sequence's step and each sequence of a batched step verify here.
    Point-mass drafts and plain steps draw each position's token from a uniform fixed by
    (seed, position): a seed then gives one reply whatever the γ (sampling.py)."""
    drafts = proposal.tokens.to(logits.device)  # [k]
    k = drafts.numel()
    if proposal.q is None and logits.device.type == "cpu" and HOST_SAMPLING:
        read = read_host(logits, drafts.tolist(), params, position_uniforms(seed, start, k + 1))
    else:
        q = proposal.q.to(logits.device) if proposal.q is not None else None  # [k, V] | None
        read = read_device(logits, q, drafts, params, generator, seed, start)
    if read.nonfinite:
        return _Verified([], 0, 0.0, read.nonfinite)
    return emitted(read, k, proposal.source)


def read_device(logits: torch.Tensor, q: torch.Tensor | None, drafts: torch.Tensor, params: SamplingParams,
                generator: torch.Generator, seed: int, start: int) -> _Read:
    """The exact rejection sampler in torch, where the logits are (any q, any device)."""
    k = drafts.numel()
    p = warp(logits, params)  # [k+1, V]
    uniforms = (torch.tensor(position_uniforms(seed, start, k + 1), dtype=torch.float64)
                if q is None else None)
    verdict = rejection_sample(p, q, drafts, generator, greedy=params.greedy, uniforms=uniforms)
    positions = torch.arange(k + 1, device=logits.device)
    p_next = p[positions, verdict.next_tokens]  # [k+1] p of each candidate next token
    top_p, top_ids = topk(p, min(NUM_ALTERNATIVES, p.shape[-1]))  # [k+1, A]
    # NaN/inf logits: flagged here and read with the rest (sample_at keeps ids in range)
    no_q = torch.zeros((), dtype=torch.bool, device=logits.device)
    bad = torch.stack([nonfinite_rows(logits).any(), nonfinite_rows(q).any() if q is not None else no_q])
    # the step's single host sync: everything read back in one float64 copy (ids are
    # exact in float64 below 2^53; cat promotes every part to the empty float64 one's type)
    parts = (verdict.accepted, verdict.next_tokens, verdict.alpha_terms, verdict.p_draft, verdict.q_draft,
             p_next, top_p.flatten(), top_ids.flatten(), drafts, bad)
    flat = torch.cat((torch.empty(0, dtype=torch.float64, device=logits.device), *parts)).tolist()
    it = iter(flat)
    accepted, nxt, alpha, p_draft, q_draft, p_nxt, tp, ti, dl, bad = [list(islice(it, t.numel())) for t in parts]
    if bad[0] or bad[1]:
        return _Read.failed("target" if bad[0] else "draft")
    width = top_p.shape[-1]
    alternatives = [tuple(Alternative(id=int(a), p=b) for a, b in zip(ti[i:i + width], tp[i:i + width]) if b > 0)
                    for i in range(0, len(tp), width)]
    return _Read([bool(a) for a in accepted], [int(x) for x in nxt], p_nxt, p_draft, q_draft, alpha,
                 alternatives, [int(x) for x in dl])


def emitted(read: _Read, k: int, source: str) -> _Verified:
    """The tokens a verified chain of ``k`` drafts emits: the accepted drafts, then the
    target's token there (plain, bonus after all k, or resampled at the first rejection)."""
    dl, alts = read.drafts, read.alternatives
    n = next((i for i in range(k) if not read.accepted[i]), k)  # drafts kept: the leading run
    tokens = [Token(id=dl[i], kind="accepted", p=read.p_draft[i], q=read.q_draft[i], alternatives=alts[i],
                    source=source) for i in range(n)]
    nxt, p_nxt = read.next_tokens, read.p_next
    if k == 0:
        tokens.append(Token(id=nxt[0], kind="target", p=p_nxt[0], alternatives=alts[0]))
    elif n == k:
        tokens.append(Token(id=nxt[k], kind="bonus", p=p_nxt[k], alternatives=alts[k]))
    else:
        tokens.append(Token(id=nxt[n], kind="resampled", p=p_nxt[n], alternatives=alts[n],
                            rejected_id=dl[n], rejected_p=read.p_draft[n], rejected_q=read.q_draft[n],
                            source=source))
    # α is measured on the positions verification actually judged on the kept path
    return _Verified(tokens, n, float(sum(read.alpha[: min(k, n + 1)])))


def read_host(logits: torch.Tensor, drafts: list[int], params: SamplingParams, uniforms: list[float]) -> _Read:
    """Point-mass drafts with the logits in host memory: the same coupled draw in numpy,
    on p's support only (host_sampling.py)."""
    rows = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits  # numpy has no bf16
    v = verify_point_mass(rows.numpy(), drafts, params, uniforms, width=min(NUM_ALTERNATIVES, logits.shape[-1]))
    if v.nonfinite:
        return _Read.failed("target")
    alternatives = [tuple(Alternative(id=a, p=b) for a, b in row if b > 0) for row in v.alternatives]
    # q is a point mass: q(x) = 1, and Σ min(p, q) = p(x)
    return _Read(v.accepted, v.next_tokens, v.p_next, v.p_draft, [1.0] * len(drafts), v.p_draft, alternatives, drafts)


def generator_on(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def same_device(a: torch.device, b: torch.device) -> bool:
    """cuda and cuda:N name one device when N is the current one."""
    if a.type != b.type:
        return False
    if a.type == "cuda" and (a.index is None) != (b.index is None):
        current = torch.cuda.current_device()
        return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)
    return a.index == b.index
