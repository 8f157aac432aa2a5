"""``specchat verify --concurrency N``: verify's sampled checks through the batched engine
(engine/batch/batched.py), N sequences in one llama.cpp decode at every step. Point-mass
drafts only; other methods are refused. The requests and checks (0)-(4): docs/design/verify.md"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Callable

import numpy as np
import torch

from specchat.verify.near_tie import compute_precision, noise_bound
from specchat.verify.single import (END, GREEDY_TOKENS, MAX_DIVERGENCES, PLAIN_SEEDS, VerifyReport, _distribution,
                                   _divergence, _exact_first_two, _pair_codes, _sequence_codes, _speculative_sample,
                                   choose_prompt, diff_check, resolve, summary)
from specchat.verify.stats import Check, goodness_of_fit, two_sample
from specchat.engine import SpeculativeEngine
from specchat.engine.batch.batched import BatchedEngine, Request
from specchat.engine.sampling import SamplingParams, warp
from specchat.errors import SpecchatError
from specchat.events import DraftCounts

PLAIN = None  # a request kind: no proposer


@torch.inference_mode()
def verify_batched(loaded: Any, profile: Any, *, concurrency: int, samples: int = 2000, tokens: int = 3,
                   prompt: str | None = None, reply_start: str = "", params: SamplingParams | None = None,
                   gamma: int | None = None, proposer_factory: Callable[[Any, Any, int | str], Any] | None = None,
                   progress: Callable[[int, int, str], None] | None = None) -> VerifyReport:
    report = progress or (lambda done, total, text: None)
    params, gamma, factory, target = resolve(loaded, profile, params, gamma, proposer_factory)
    if target.name != "llama.cpp":
        raise SpecchatError(f"batched verify (--concurrency {concurrency}) needs the llama.cpp backend, not "
                            f"{target.name}", key="--concurrency", hint="use a llama.cpp profile, or --concurrency 1")
    probe_proposer = factory(loaded, profile, gamma)
    if not probe_proposer.point_mass:
        raise SpecchatError(f"batched verify checks point-mass drafts (n-gram lookup) only, not "
                            f"{probe_proposer.kind}'s", key="speculation.method",
                            hint="verify an ngram profile, or use --concurrency 1")
    # the γ of each request kind, in the order requests cycle through them
    kind_gammas = [gamma, PLAIN, 1, profile.speculation.num_speculative_tokens]
    chosen = choose_prompt(loaded, profile, target, probe_proposer, params, gamma, prompt, reply_start, samples,
                           tokens, report, concurrency=concurrency,
                           kinds=["plain" if g is PLAIN else f"γ={g}" for g in kind_gammas])
    chosen.settings["candidates"] = []  # the batched report lists the chosen prompt only
    kinds = KindQueue(loaded, profile, factory)
    engine = BatchedEngine(target, n_seq=concurrency, proposer_factory=kinds, eos_token_ids=chosen.eos)
    checks: list[Check] = []
    notes: list[str] = []
    drafts = DraftCounts()
    try:
        if not params.greedy:
            checks += _sampled_checks(engine, kinds, kind_gammas, chosen.ids, chosen.probe, params, samples, tokens,
                                      chosen.plain_engine, drafts, report, chosen.eos)
            if drafts.num_drafts == 0:
                checks.append(Check("speculation was exercised", False,
                                    detail="no drafts were proposed: nothing was verified — for n-gram lookup "
                                           "use a --prompt / --reply-start whose answer repeats its words"))
        else:
            notes.append("temperature 0: greedy decoding, so only the token-by-token diff applies")
        report(1, 1, "greedy diff")
        checks.append(_greedy_diff(engine, kinds, kind_gammas, target, chosen.greedy_ids, params))
    finally:
        engine.close()
    return VerifyReport(all(c.passed for c in checks), checks, chosen.settings, summary(drafts), notes)


class KindQueue:
    """The batched engine's proposer factory: it takes requests in order, so each call
    gives the next queued kind's proposer (a new one; None for a plain request)."""

    def __init__(self, loaded: Any, profile: Any, factory: Callable) -> None:
        self.loaded, self.profile, self.factory = loaded, profile, factory
        self.queue: deque[int | str | None] = deque()

    def __call__(self, lane: Any) -> Any:
        g = self.queue.popleft()
        return None if g is PLAIN else self.factory(self.loaded, self.profile, g)


def _sampled_checks(engine: BatchedEngine, kinds: KindQueue, kind_gammas: list[int | str | None], ids: list[int],
                    probe: Any, params: SamplingParams, samples: int, tokens: int, plain_engine: SpeculativeEngine,
                    drafts: DraftCounts, report: Callable[[int, int, str], None], eos: list[int]) -> list[Check]:
    """verify's sampled checks (docs/design/verify.md, 1-3) on the batched samples; ``drafts``
    counts their drafts."""
    plan: list[int | str | None] = []
    while len(plan) - plan.count(PLAIN) < samples:  # the kinds in turn, until ``samples`` of them draft
        plan.append(kind_gammas[len(plan) % len(kind_gammas)])
    spec_at = [j for j, g in enumerate(plan) if g is not PLAIN]
    plain_at = [j for j, g in enumerate(plan) if g is PLAIN]
    total = len(plan) + samples
    report(0, total, "batched samples")
    kinds.queue.extend(plan)
    requests = [Request(ids, dataclasses.replace(params, seed=j), tokens) for j in range(len(plan))]
    seqs = np.full((len(plan), tokens), END, dtype=np.int64)
    got = [0] * len(plan)
    for j, step in engine.generate(requests):
        new = [t.id for t in step.tokens][:tokens - got[j]]
        seqs[j, got[j]:got[j] + len(new)] = new
        got[j] += len(new)
        drafts.add(step.stats)
        if step.finish_reason and j % 50 == 0:
            report(j, total, "batched samples")
    plain = np.empty((samples, tokens), dtype=np.int64)
    for i in range(samples):
        if i % 50 == 0:
            report(len(plan) + i, total, "plain samples (one sequence)")
        plain[i] = _speculative_sample(plain_engine, ids, dataclasses.replace(params, seed=PLAIN_SEEDS + i), tokens)
    report(total, total, "exact distributions")
    n = engine.n_seq
    spec, beside = seqs[spec_at], seqs[plain_at]
    p_first, joint, agrees = batched_law(plain_engine.target, ids, params, eos, n, probe.joint is not None)
    exact_first = _distribution(p_first)
    checks = [agrees, goodness_of_fit(f"batched ×{n} speculative first token vs exact p", spec[:, 0], exact_first)]
    if joint is not None:
        vocab = p_first.shape[-1] + 1
        checks.append(goodness_of_fit(f"batched ×{n} speculative first two tokens vs exact joint "
                                      f"({len(joint)} cells enumerated)", _pair_codes(spec, vocab), joint))
    checks.append(goodness_of_fit(f"batched ×{n} plain (beside drafting sequences) first token vs exact p",
                                  beside[:, 0], exact_first))
    codes = _sequence_codes(np.concatenate([spec, plain]))
    checks.append(two_sample(f"batched ×{n} speculative vs one-sequence plain, {tokens}-token continuations",
                             codes[:len(spec)], codes[len(spec):]))
    return checks


@torch.inference_mode()
def batched_law(target: Any, ids: list[int], params: SamplingParams, eos: list[int], n: int,
                pairs: bool) -> tuple[torch.Tensor, dict[int, float] | None, Check]:
    """(first-token law, first-two-token joint or None, the check that its logits agree
    with one sequence's): the law the batched engine samples from at ``ids``, in a fresh
    batched context of ``n`` sequences (docs/design/verify.md, check 0), enumerated as verify's
    one-sequence joint is (single._exact_first_two) with each second token read there."""
    context = target.open_batch(n, len(ids) + 2)
    worst = magnitude = 0.0
    try:
        rows = [(t, i, s, i == len(ids) - 1) for s in range(n) for i, t in enumerate(ids)]
        first = torch.from_numpy(context.decode_all(rows))[0]  # every sequence's the same prompt
        alone = target.forward(ids)[0].float()
        worst, magnitude = float((first - alone).abs().max()), float(alone.abs().max())
        p_first = warp(first[None], params)[0]

        def second(t: int) -> torch.Tensor:  # t as one row of n, measured against one sequence's
            nonlocal worst, magnitude
            logits = torch.from_numpy(context.decode([(t, len(ids), s, True) for s in range(n)]))[0]
            for s in range(n):
                context.drop(s, len(ids))
            alone = target.forward(ids + [t])[0].float()
            worst, magnitude = max(worst, float((logits - alone).abs().max())), max(magnitude, float(alone.abs().max()))
            return logits

        joint = _exact_first_two(target, ids, params, p_first, eos, second) if pairs else None
    finally:
        context.close()
    precision = compute_precision(target)
    bound = noise_bound(precision, magnitude)
    agrees = Check(f"batched ×{n} logits vs one sequence's (the first token and its likeliest continuations)",
                   worst <= bound, detail=f"max |Δ logit| {worst:.3g} (the {precision} batch-noise bound {bound:.3g})")
    return p_first, joint, agrees


def _greedy_diff(engine: BatchedEngine, kinds: KindQueue, kind_gammas: list[int | str | None], target: Any,
                 ids: list[int], params: SamplingParams) -> Check:
    """One greedy request of each kind at once, each against the one-sequence plain reply;
    after a divergence a request resumes from plain's prefix (plain's token included), so
    every divergence in the window is found and judged by the near-tie rule."""
    greedy = dataclasses.replace(params, temperature=0.0, seed=0)
    plain = [t.id for s in SpeculativeEngine(target, None).generate(ids, greedy, GREEDY_TOKENS) for t in s.tokens]
    precision = compute_precision(target)
    labels = ["plain" if g is PLAIN else f"γ={g}" for g in kind_gammas]
    starts = {r: 0 for r in range(len(kind_gammas))}
    divergences: list[dict[str, Any]] = []
    while starts and len(divergences) < MAX_DIVERGENCES:
        pending = sorted(starts)
        kinds.queue.extend(kind_gammas[r] for r in pending)
        requests = [Request(ids + plain[:starts[r]], greedy, len(plain) - starts[r]) for r in pending]
        replies: dict[int, list[int]] = {r: [] for r in pending}
        for j, step in engine.generate(requests):
            replies[pending[j]] += [t.id for t in step.tokens]
        for r in pending:
            start, reply = starts.pop(r), replies[r]
            at = next((start + i for i, (a, b) in enumerate(zip(reply, plain[start:])) if a != b), None)
            if at is None and len(reply) == len(plain) - start:
                continue
            if at is None:  # one run stopped (EOS) where the other went on
                at = start + min(len(reply), len(plain) - start)
            divergences.append({**_divergence(target, ids, plain, reply, at - start, at, precision),
                                "request": labels[r]})
            if at + 1 < len(plain):
                starts[r] = at + 1
    name = (f"greedy batched vs one-sequence diff ({engine.n_seq} at once: {', '.join(labels)}; "
            f"{len(plain)} tokens, {precision})")
    return diff_check(name, plain, divergences, precision, "batched")
