"""The speculative decoding loop: propose → verify → accept/resample/bonus → roll back → emit."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from specchat.engine import epilogue  # looked up at call time: tests plant bugs there
from specchat.engine.backends import Backend, as_backend, common_prefix_length
from specchat.engine.gamma.controller import Controller, make_controller
from specchat.engine.host_sampling import verify_point_mass
from specchat.engine.proposers import Proposal, Proposer
from specchat.engine.sampling import SamplingParams, nonfinite_rows, position_uniforms, rejection_sample, topk, warp
from specchat.engine.timing import Stopwatch, StepTimer
from specchat.engine.trees.walk import walk
from specchat.contention import CpuShare
from specchat.events import Alternative, Step, Token

NUM_ALTERNATIVES = 5
# point-mass steps whose logits are in host memory are verified in numpy (host_sampling.py);
# False sends them through the torch sampler too (tests compare the two)
HOST_SAMPLING = True


@dataclass
class _Verified:
    tokens: list[Token]
    num_accepted: int
    alpha_sum: float
    nonfinite: str | None = None  # "target" / "draft": whose logits were NaN or infinite
    alpha_count: int | None = None  # verified positions behind alpha_sum (None: min(k, n + 1))
    positions: int | None = None  # a tree's positions judged on the kept path (None: a chain's)


class SpeculativeEngine:
    """Exact speculative decoding of one sequence.

    ``target``: a :class:`~specchat.engine.backends.Backend` (transformers, llama.cpp, …)
    or a transformers causal LM, which is wrapped in the transformers backend.

    ``proposer=None`` is plain decoding through the same code path (k = 0 every step); so
    is a proposer with a model whose cache cannot roll back rejected drafts (the target's
    or the draft's), and ``notice`` then says why, once, for the UI to show.
    ``generate`` yields a :class:`~specchat.events.Step` per round; it folds none of them
    into telemetry: whoever consumes the steps does (the turn loop, serve, bench).
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
            yield from self._generate(ids, params, max_new_tokens, set(stop_token_ids))

    def _generate(self, ids: list[int], params: SamplingParams, max_new_tokens: int, stops: set[int]) -> Iterator[Step]:
        generator = torch.Generator(device=self.device)
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        seed = generator.initial_seed()  # also keys the per-position draws (sampling.position_uniforms)
        draft_generator = self._draft_generator(generator, seed)
        self.controller.start_turn()
        watch = Stopwatch(self.device)
        self.cpu_share.take(fresh=True)  # the first step's share starts here
        reused = min(common_prefix_length(self.target.ids, ids), len(ids) - 1)
        if len(ids) >= self.target.max_length or max_new_tokens <= 0:
            yield epilogue.ended("context" if max_new_tokens > 0 else "length")
            return
        # the target's prefill is folded into the first step's forward (one pass over the
        # prompt and the first drafts, as plain generate does); that step's times are then
        # not used as verification timings (see StepStats.prefill_tokens)
        if self.proposer and self.controller.prefills_proposer():
            self.proposer.prefill(ids)
        prefill = {"prefill_ms": watch.lap(), "prefill_tokens": len(ids) - 1 - reused, "reused_tokens": reused}
        emitted = steps = 0
        while True:
            if self._cancel.is_set():
                yield epilogue.ended("cancelled")
                return
            timer = StepTimer(self.device)  # the step's own time, not the consumer's
            room = self.target.max_length - len(ids)
            gamma, gain = self.controller.choose(ids) if self.proposer else (0, None)
            gamma = max(0, min(gamma, max_new_tokens - emitted - 1, room - 1))
            proposal = (self.proposer.propose(ids, gamma, params, draft_generator) if gamma > 0
                        else Proposal(torch.empty(0, dtype=torch.long), None))
            drafted = timer.mark()
            result = self._verify(ids, proposal, params, generator, seed, timer)
            if result.nonfinite:
                self.reset()  # KV computed alongside NaNs is not reused
                raise epilogue.nonfinite(result.nonfinite, f"at step {steps + 1} of this reply, before its token "
                                                           f"{emitted + 1}")
            k, n = len(proposal.tokens), result.num_accepted  # n: the verdict, before any stop cut
            settled = epilogue.settle(ids, result.tokens, emitted, stops=stops, eos=self.eos_token_ids,
                                      max_new_tokens=max_new_tokens, max_length=self.target.max_length)
            tokens, finish = settled.tokens, settled.finish
            emitted += len(tokens)
            if self.proposer:
                self.proposer.observe(n)
            source = (proposal.source or self.proposer.kind) if k else ""
            step_stats = epilogue.stats(
                gamma, k, n, result.alpha_sum, self.controller.assess(k, source),
                alpha_count=result.alpha_count,
                draft_forwards=proposal.forwards,
                draft_catch_up_tokens=proposal.catch_up_tokens,
                verified_positions=result.positions,
                draft_ms=timer.ms(0, drafted),
                verify_ms=timer.ms(drafted, drafted + 1),  # the target's forward
                total_ms=timer.ms(0, timer.mark()),  # + sampling, verification and bookkeeping
                predicted_gain=gain,
                draft_source=source,
                cpu_others=self.cpu_share.take(),
                **prefill,
            )
            prefill = {}
            steps += 1
            self.controller.observe(step_stats, proposal)
            yield Step(tuple(tokens), step_stats, finish)
            if finish:
                return

    def _draft_generator(self, generator: torch.Generator, seed: int) -> torch.Generator:
        """The generator the proposer draws with. A torch generator draws only on its own
        device, so a draft model on another device than the target gets one of its own,
        seeded from the turn's seed (a seed still fixes the reply); on the same device
        both share one stream, as before."""
        device = self.proposer.sampling_device if self.proposer is not None else None
        if device is None or same_device(torch.device(device), self.device):
            return generator
        # an LCG step of the seed: a stream of its own, fixed by the seed
        return generator_on(torch.device(device), (seed * 6364136223846793005 + 1442695040888963407) % 2**64)

    def _verify(self, ids: list[int], proposal: Proposal, params: SamplingParams,
                generator: torch.Generator, seed: int, timer: StepTimer) -> _Verified:
        """One target pass over the last token and k drafts → the emitted tokens
        (accepted drafts, then one resampled/bonus/target token)."""
        if proposal.parents is not None and proposal.tokens.numel():
            return self._verify_tree(ids, proposal, params, generator, timer)
        drafts = proposal.tokens.to(self.device)  # [k]
        logits = self.target.forward(ids, extra=drafts, num_logits=drafts.numel() + 1)  # [k+1, V]
        timer.mark()
        return verify_chain(logits, proposal, params, generator, seed, len(ids))

    def _verify_tree(self, ids: list[int], proposal: Proposal, params: SamplingParams,
                     generator: torch.Generator, timer: StepTimer) -> _Verified:
        """A tree of drafts in one target pass, walked by recursive rejection sampling
        (tree.py); the target's cache then keeps the walked path only."""
        tokens = proposal.tokens.tolist()
        logits = self.target.forward_tree(ids, tokens, proposal.parents)  # [N+1, V]
        timer.mark()
        if bool(nonfinite_rows(logits).any()):
            return _Verified([], 0, 0.0, "target")
        p = warp(logits, params).double()
        q = proposal.q.to(self.device) if proposal.q is not None else None
        verdict = walk(p, tokens, proposal.parents, q, generator, greedy=params.greedy)
        self.target.keep_path(verdict.path)
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
        return _Verified(out, n, 0.0, alpha_count=0, positions=n + (0 if verdict.bonus else 1))

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
    accepted, nxt, alpha, p_draft, q_draft, p_nxt, tp, ti, dl, bad = _split(flat, [t.numel() for t in parts])
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
    n = 0
    while n < k and read.accepted[n]:
        n += 1
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


def _split(flat: list[float], sizes: list[int]) -> list[list[float]]:
    out, start = [], 0
    for size in sizes:
        out.append(flat[start:start + size])
        start += size
    return out


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
