"""``specchat verify``: is speculative sampling exact on these models and settings? Compares
``samples`` seeded speculative continuations with plain ones and with the exact law, at a
fixed γ and, when the profile's γ is "auto", through its adaptive controller. The checks
(0)-(5), their rules, the prompt choice and power: docs/design/verify.md.
``proposer_factory(loaded, profile, gamma)`` replaces the profile's proposer (tests plant bugs with it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from specchat.verify.near_tie import compute_precision, describe_gap, near_tie_tolerance, noise_bound
from specchat.verify.law import law_checks
from specchat.verify.stats import MIN_EXPECTED, Check, goodness_of_fit, two_sample
from specchat.engine import SpeculativeEngine
from specchat.engine.backends import Backend, as_backend
from specchat.engine.gamma.controller import Controller
from specchat.engine.engine import generator_on
from specchat.engine.sampling import SamplingParams, warp
from specchat.events import DraftCounts

# Candidate (question, start of the answer) pairs: each reply so far repeats itself, so an
# n-gram draft (copied from it) is plausible but not certain and the samples exercise
# acceptance, rejection + resampling and bonus tokens within three tokens (starting from
# an empty reply, lookup drafts chat-template tokens that are never kept); the first two
# leave the next word open (the cells each fills on the embedded model:
# docs/benchmarks/why-the-numbers.md). verify picks the widest on the models it is given
# (_choose_prompt).
DEFAULT_CANDIDATES = (
    ("Describe a city.", "The city is big and the city is"),
    ("Write a poem about the sea.", "The sea is blue, the sea is"),
    ("Say 'yes' or 'no' ten times, at random.", "yes, no, yes, yes, no,"),
)
# The deterministic checks (batched-logit noise, greedy diff) keep the yes/no prompt: there
# greedy n-gram drafts are long and often kept, so a fault in the later rows of a
# verification shows. On the widest prompt drafts are mostly rejected at their first
# position, whose row a "shifted rows" fault leaves intact: the greedy diff passed it.
DEFAULT_PROMPT, DEFAULT_REPLY_START = DEFAULT_CANDIDATES[-1]
GREEDY_TOKENS = 32
MAX_DIVERGENCES = 8  # reported at most, in the 32-token window
ENUMERATE_FIRST = 64  # first tokens whose second-token distribution is enumerated exactly
PLAIN_SEEDS = 10**9  # plain sample i uses seed PLAIN_SEEDS + i, never a speculative sample's seed
# The γ = auto pass's sample i uses seed AUTO_SEEDS + i. With the fixed pass's seeds it
# repeated that pass's samples token for token (n-gram drafts are coupled to the seed,
# docs/engine-api.md, "Seeds"): the same TV and p printed twice, counted as two checks' evidence.
AUTO_SEEDS = 2 * 10**9
END = -1  # code of "no token: the sequence ended"


class EveryStep(Controller):
    """γ on every step: verify exercises the rejection sampler from the first token
    (the default controllers interleave plain calibration steps)."""

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def choose(self, ids):
        return self.gamma, None


@dataclass
class VerifyReport:
    passed: bool
    checks: list[Check]
    settings: dict[str, Any]
    speculation: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    speculation_auto: dict[str, int] | None = None  # the γ = auto samples' counts, when checked


def default_proposer(loaded: Any, profile: Any, gamma: int | str) -> Any:
    from specchat.engine.factory import build_proposer

    spec = profile.speculation
    return build_proposer(spec, loaded, gamma, spec.max_speculative_tokens if gamma == "auto" else gamma)


def _modes(loaded: Any, target: Backend, profile: Any, factory: Callable,
           gamma: int) -> list[tuple[str, SpeculativeEngine]]:
    """(label, engine): drafts at every step with γ fixed, and the profile's adaptive
    controller when its γ is "auto"."""
    modes = [("", SpeculativeEngine(target, factory(loaded, profile, gamma), controller=EveryStep(gamma)))]
    if profile.speculation.num_speculative_tokens == "auto":
        modes.append(("γ=auto", SpeculativeEngine(target, factory(loaded, profile, "auto"))))
    return modes


def resolve(loaded: Any, profile: Any, params: SamplingParams | None, gamma: int | None,
            proposer_factory: Callable | None) -> tuple[SamplingParams, int, Callable, Backend]:
    """(params, γ, proposer factory, target): what verify's arguments leave to the profile
    filled in from it (γ = "auto" is checked at its largest)."""
    from specchat.engine.factory import sampling_params

    spec = profile.speculation
    if gamma is None:
        gamma = spec.num_speculative_tokens if isinstance(spec.num_speculative_tokens, int) else spec.max_speculative_tokens
    return (params or sampling_params(profile.sampling), gamma, proposer_factory or default_proposer,
            as_backend(loaded.target))


@dataclass
class Prompted:
    """The prompt both verify paths settle on before any check, and the settings reported."""

    plain_engine: SpeculativeEngine
    eos: list[int]
    ids: list[int]  # the sampled checks' prompt
    greedy_ids: list[int]  # the deterministic checks' prompt
    probe: PromptProbe
    settings: dict[str, Any]


def choose_prompt(loaded: Any, profile: Any, target: Backend, proposer: Any, params: SamplingParams, gamma: int,
                  prompt: str | None, reply_start: str, samples: int, tokens: int, report: Callable,
                  **more_settings: Any) -> Prompted:
    """The given prompt, or the widest of DEFAULT_CANDIDATES (_choose_prompt) with the yes/no
    one kept for the deterministic checks; ``more_settings`` follow the common ones."""
    from specchat.engine.template import ChatTemplate

    plain_engine = SpeculativeEngine(target, None)
    chat = ChatTemplate.of(profile, loaded.tokenizer)

    def prompt_ids(prompt: str, reply_start: str) -> list[int]:
        ids = chat.prompt_ids([{"role": "user", "content": prompt}])
        if reply_start:  # the assistant's answer so far: the samples continue it
            ids += list(loaded.tokenizer(reply_start, add_special_tokens=False)["input_ids"])
        return ids

    eos = sorted(plain_engine.eos_token_ids)
    candidates = [(prompt, reply_start)] if prompt is not None else list(DEFAULT_CANDIDATES)
    report(0, 1, "choosing the prompt")
    chosen = _choose_prompt(target, proposer, [(c, prompt_ids(*c)) for c in candidates],
                            params, gamma, samples, tokens, eos)
    (prompt, reply_start), ids, probe = chosen[0]
    greedy_ids = ids if len(candidates) == 1 else prompt_ids(DEFAULT_PROMPT, DEFAULT_REPLY_START)
    settings = {"samples": samples, "tokens": tokens, "gamma": gamma, "prompt": prompt, "reply_start": reply_start,
                "prompt_tokens": len(ids), "prompt_cells": probe.cells,
                "candidates": [{"prompt": c[0], "reply_start": c[1], "cells": pr.cells, "drafts": pr.drafts}
                               for c, _, pr in chosen] if len(chosen) > 1 else [],
                "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                "method": profile.speculation.method, "dtype": target.precision, "backend": target.name,
                "precision": compute_precision(target), **more_settings}
    if greedy_ids is not ids:
        settings["greedy_prompt"] = DEFAULT_PROMPT
        settings["greedy_reply_start"] = DEFAULT_REPLY_START
    return Prompted(plain_engine, eos, ids, greedy_ids, probe, settings)


@torch.inference_mode()  # no autograd graph behind any forward here
def verify(loaded: Any, profile: Any, *, samples: int = 2000, tokens: int = 3, prompt: str | None = None,
           reply_start: str = "", params: SamplingParams | None = None, gamma: int | None = None,
           proposer_factory: Callable[[Any, Any, int], Any] | None = None,
           progress: Callable[[int, int, str], None] | None = None) -> VerifyReport:
    report = progress or (lambda done, total, text: None)
    params, gamma, factory, target = resolve(loaded, profile, params, gamma, proposer_factory)
    chosen = choose_prompt(loaded, profile, target, factory(loaded, profile, gamma), params, gamma, prompt,
                           reply_start, samples, tokens, report)
    ids, probe, settings = chosen.ids, chosen.probe, chosen.settings
    checks: list[Check] = [_noise_check(target, chosen.greedy_ids, settings["precision"])]
    report(0, 1, "exact law of the sampler")
    checks += law_checks(probe.logits, probe.p_first, None if probe.point_mass else probe.q_first,
                         probe.first_draft, params)
    notes: list[str] = []
    modes = _modes(loaded, target, profile, factory, gamma)
    drafts = DraftCounts()  # the fixed γ's drafts; the γ = auto pass's apart, when it runs
    auto_drafts = DraftCounts() if len(modes) > 1 and not params.greedy else None
    if not params.greedy:
        total = samples * (len(modes) + 1)
        spec_runs = []
        for m, (label, engine) in enumerate(modes):
            counts = auto_drafts if label else drafts
            seqs = np.empty((samples, tokens), dtype=np.int64)
            for i in range(samples):
                if i % 50 == 0:
                    report(m * samples + i, total, f"speculative samples {label}".strip())
                seed = AUTO_SEEDS + i if label else i
                seqs[i] = _speculative_sample(engine, ids, dataclasses.replace(params, seed=seed), tokens, counts)
            spec_runs.append((label, seqs))
        plain_seqs = np.empty((samples, tokens), dtype=np.int64)
        for i in range(samples):
            if i % 50 == 0:
                report(len(modes) * samples + i, total, "plain samples")
            plain_seqs[i] = _speculative_sample(chosen.plain_engine, ids, dataclasses.replace(
                params, seed=PLAIN_SEEDS + i), tokens)
        report(total, total, "exact distributions")
        p_first, joint = probe.p_first, probe.joint
        exact_first = _distribution(p_first)
        vocab = p_first.shape[-1] + 1
        checks.append(goodness_of_fit("plain first token vs exact p", plain_seqs[:, 0], exact_first))
        for label, spec_seqs in spec_runs:
            name = f"speculative ({label})" if label else "speculative"
            # the bug's law is known where the first position always drafts: the fixed-γ pass
            bug = _resample_from_p(p_first, probe.q_first) if probe.q_first is not None and not label else None
            checks.append(goodness_of_fit(f"{name} first token vs exact p", spec_seqs[:, 0], exact_first,
                                          bug=None if bug is None else ("resampling from p", _distribution(bug))))
            if joint is not None:
                codes = _pair_codes(spec_seqs, vocab)
                joint_bug = None if bug is None else (
                    "resampling from p (first position)",
                    {c: pr * float(bug[c // vocab]) / float(p_first[c // vocab]) for c, pr in joint.items()})
                checks.append(goodness_of_fit(f"{name} first two tokens vs exact joint "
                                              f"({len(joint)} cells enumerated)", codes, joint, bug=joint_bug))
            codes = _sequence_codes(np.concatenate([spec_seqs, plain_seqs]))  # one code book for both
            checks.append(two_sample(f"{name} vs plain, {tokens}-token continuations",
                                     codes[:samples], codes[samples:]))
        if auto_drafts is not None and auto_drafts.num_drafts == 0:
            notes.append("note: with γ = auto the controller drafted nothing in these samples (speculation did "
                         "not pay here), so that path was checked as plain decoding")
        if drafts.num_drafts == 0:
            checks.append(Check("speculation was exercised", False,
                                detail="no drafts were proposed: nothing was verified — for n-gram lookup "
                                       "use a --prompt / --reply-start whose answer repeats its words"))
        else:
            notes += [f"note: no draft was {path} in any sample, so that path of the sampler went unchecked — use "
                      "a --prompt / --reply-start whose continuation repeats earlier text without being certain"
                      for path, count in (("accepted", drafts.num_accepted_tokens), ("rejected", drafts.num_rejected))
                      if count == 0]
    else:
        notes.append("temperature 0: greedy decoding, so only the deterministic checks apply (the sampler's "
                     "exact law and the token-by-token diff)")
    report(1, 1, "greedy diff")
    checks += [_greedy_diff(target, engine, chosen.greedy_ids, params, label) for label, engine in modes]
    return VerifyReport(all(c.passed for c in checks), checks, settings, summary(drafts), notes,
                        None if auto_drafts is None else summary(auto_drafts))


def summary(drafts: DraftCounts) -> dict[str, int]:
    """Draft tokens proposed and kept, steps that rejected one and steps that drew a bonus token."""
    return {"drafted": drafts.num_draft_tokens, "accepted": drafts.num_accepted_tokens,
            "rejected": drafts.num_rejected, "bonus": drafts.num_drafts - drafts.num_rejected}


@dataclass
class PromptProbe:
    """What verify needs to know of a candidate prompt before sampling from it."""

    cells: int  # cells of the exact first-two-token joint (first token when tokens = 1) expected ≥ 5 times
    drafts: int  # tokens the proposer drafts at the prompt's end (0: the first step would not speculate)
    p_first: torch.Tensor  # [V] the exact first-token distribution
    joint: dict[int, float] | None  # the exact first-two-token joint (_exact_first_two), when sampled
    q_first: torch.Tensor | None  # [V] the law the first draft is drawn from (one-hot for lookup)
    logits: torch.Tensor  # [V] the target's logits there (p_first = warp of them)
    first_draft: int | None  # the first draft's id (None: the proposer drafts nothing here)
    point_mass: bool  # the drafts carry no q (n-gram lookup): the coupled form verifies them


@torch.inference_mode()
def _choose_prompt(target: Backend, proposer: Any, candidates: list[tuple[tuple[str, str], list[int]]],
                   params: SamplingParams, gamma: int, samples: int, tokens: int,
                   eos: list[int]) -> list[tuple[tuple[str, str], list[int], PromptProbe]]:
    """The candidates with their probes, the chosen one first: of those the proposer
    drafts at, the one with the most cells (the first listed on a tie, so a greedy run,
    where every prompt has one cell, takes the first that drafts)."""
    SpeculativeEngine(target, proposer, controller=EveryStep(gamma))  # tells the proposer the target's vocabulary
    probed = []
    for candidate, ids in candidates:
        logits = target.forward(ids)[0]  # [V]
        p_first = warp(logits[None], params)[0]
        joint = _exact_first_two(target, ids, params, p_first, eos) if tokens >= 2 and not params.greedy else None
        law = joint if joint is not None else _distribution(p_first)
        proposal = proposer.propose(ids, gamma, params, generator_on(proposer.sampling_device or target.device, 0))
        drafts = int(proposal.tokens.numel())
        q_first = None
        if drafts:
            q_first = (proposal.q[0].double().cpu() if proposal.q is not None else
                       torch.nn.functional.one_hot(proposal.tokens[:1].cpu(), p_first.shape[-1])[0].double())
        cells = sum(1 for p in law.values() if p * samples >= MIN_EXPECTED)
        probed.append((candidate, ids, PromptProbe(cells, drafts, p_first, joint, q_first, logits,
                                                   int(proposal.tokens[0]) if drafts else None,
                                                   proposal.q is None)))
    proposer.reset()
    best = max(range(len(probed)), key=lambda i: (probed[i][2].drafts > 0, probed[i][2].cells, -i))
    return [probed[best]] + probed[:best] + probed[best + 1:]


def _resample_from_p(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[V] the first token's law when a rejected draft is replaced by a draw from p instead
    of the residual norm(max(p − q, 0)): kept with min(p, q), else drawn from p."""
    p = p.double().cpu()
    kept = torch.minimum(p, q)
    return kept + (1.0 - float(kept.sum())) * p


def _speculative_sample(engine: SpeculativeEngine, ids: list[int], params: SamplingParams, tokens: int,
                        drafts: DraftCounts | None = None) -> list[int]:
    out: list[int] = []
    for step in engine.generate(ids, params, max_new_tokens=tokens):
        out += [t.id for t in step.tokens]
        if drafts is not None:
            drafts.add(step.stats)
    return (out + [END] * tokens)[:tokens]


def _distribution(p: torch.Tensor) -> dict[int, float]:
    nz = torch.nonzero(p > 0).flatten().tolist()
    values = p.double()[nz].tolist()
    return dict(zip(nz, values))


@torch.inference_mode()
def _exact_first_two(target: Backend, ids: list[int], params: SamplingParams, p_first: torch.Tensor,
                     eos: list[int], second_logits: Callable[[int], torch.Tensor] | None = None) -> dict[int, float]:
    """Exact p(t1, t2) for the ENUMERATE_FIRST most likely t1 (pairs keyed as codes;
    a t1 that ends the sequence pairs with END). One one-token forward per t1: the
    backend's cache holds the prompt; ``second_logits(t1)``: the [V] logits after t1 some
    other way (a batched context's, verify/batched.py)."""
    second_logits = second_logits or (lambda t: target.forward(ids + [t])[0])
    vocab = p_first.shape[-1] + 1
    top = torch.topk(p_first, min(ENUMERATE_FIRST, int((p_first > 0).sum()))).indices.tolist()
    joint: dict[int, float] = {}
    for t in top:
        p1 = float(p_first[t])
        if t in eos:
            joint[t * vocab + (END + 1)] = p1
            continue
        p_second = warp(second_logits(t)[None], params)[0].double()  # [V]
        for t2 in torch.nonzero(p_second > 0).flatten().tolist():
            joint[t * vocab + t2 + 1] = p1 * float(p_second[t2])
    return joint


def _pair_codes(seqs: np.ndarray, vocab: int) -> np.ndarray:
    return seqs[:, 0] * vocab + (seqs[:, 1] + 1)


def _sequence_codes(seqs: np.ndarray) -> np.ndarray:
    _, codes = np.unique(seqs, axis=0, return_inverse=True)
    return codes.reshape(-1)


@dataclass(frozen=True)
class BatchNoise:
    delta: float  # the largest |Δ logit| between a batched row and the one-token step's row
    magnitude: float  # the largest |logit| compared (ULP-based bounds scale with it)


@torch.inference_mode()
def batch_logit_noise(target: Backend, ids: list[int], tokens: int = 16, width: int = 4) -> BatchNoise:
    """How far a batched forward's logits stray from one-token steps on this backend, over
    ``tokens`` greedy positions after ``ids``: computed once a token at a time and once
    ``width`` at a time, the last ``width - 1`` passed as drafts (``extra``), exactly as a
    verification step passes them, and each batch run after other drafts at the same
    positions were rolled back, as after a rejection — a fault only on those paths (rows
    misread when drafts are passed, a rollback that leaves stale positions) shows here too.

    Float32 transformers models stray by ~1e-5; llama.cpp's kernels take other code paths
    for a batch than for one token (near_tie.GGUF_NOISE_BOUND has each format's bound)."""
    target.reset()
    seq, singles = list(ids), []
    for _ in range(tokens):
        logits = target.forward(seq)[-1]
        singles.append(logits)
        seq.append(int(logits.argmax()))
    target.reset()
    target.forward(ids)
    delta = magnitude = 0.0
    for start in range(len(ids), len(ids) + tokens - width + 1, width):
        drafts = torch.tensor(seq[start + 1:start + width], device=target.device)
        target.forward(seq[:start + 1], extra=(drafts + 1) % target.vocab_size, num_logits=width)  # rejected…
        batch = target.forward(seq[:start + 1], extra=drafts, num_logits=width)  # …rolled back; rows predict seq[start+1 .. start+width]
        for j in range(width):
            if start + j + 1 - len(ids) < tokens:
                single = singles[start + j + 1 - len(ids)].float()
                delta = max(delta, float((batch[j].float().cpu() - single.cpu()).abs().max()))
                magnitude = max(magnitude, float(single.abs().max()))
    target.reset()
    return BatchNoise(delta, magnitude)


def _noise_check(target: Backend, ids: list[int], precision: str) -> Check:
    """Batched vs one-token logits against the format's fixed bound: a backend whose batched
    forward is wrong (rows shifted, stale cache) fails here whatever the temperature, and
    cannot widen the greedy diff's near-tie rule, which uses the same fixed bound."""
    measured = batch_logit_noise(target, ids)
    bound = noise_bound(precision, measured.magnitude)
    name = f"batched vs one-token logits ({precision})"
    extra = {"noise": measured.delta, "bound": bound, "magnitude": measured.magnitude}
    if measured.delta > bound:
        return Check(name, False, detail=f"batched logits differ from one-token logits by {measured.delta:.3g}, "
                                         f"more than this format allows ({bound:.3g}): a backend fault, not rounding",
                     extra=extra)
    return Check(name, True, detail=f"differ by {measured.delta:.2g}, within the {bound:.2g} this format allows",
                 extra=extra)


@torch.inference_mode()
def _greedy_diff(target: Backend, spec_engine: SpeculativeEngine, ids: list[int], params: SamplingParams,
                 label: str = "") -> Check:
    """Greedy speculative vs greedy plain, token by token. After a divergence the
    speculative run resumes from plain's prefix (plain's token included), so every
    divergence in the window is found and reported with its top-two logit gap; the
    check passes when each is a near-tie: within the target precision's fixed bound
    (near_tie.near_tie_tolerance), which each divergence's line names."""
    greedy = dataclasses.replace(params, temperature=0.0, seed=0)
    plain_engine = SpeculativeEngine(target, None)
    plain = [t.id for s in plain_engine.generate(ids, greedy, GREEDY_TOKENS) for t in s.tokens]
    precision = compute_precision(target)
    divergences: list[dict[str, Any]] = []
    start = 0
    while start < len(plain) and len(divergences) < MAX_DIVERGENCES:
        spec = [t.id for s in spec_engine.generate(ids + plain[:start], greedy, len(plain) - start) for t in s.tokens]
        at = next((start + i for i, (a, b) in enumerate(zip(spec, plain[start:])) if a != b), None)
        if at is None and len(spec) == len(plain) - start:
            break
        if at is None:  # one run stopped (EOS) where the other went on
            at = start + min(len(spec), len(plain) - start)
        divergences.append(_divergence(target, ids, plain, spec, at - start, at, precision))
        start = at + 1
    name = f"greedy token-by-token diff ({len(plain)} tokens, {precision}{', ' + label if label else ''})"
    return diff_check(name, plain, divergences, precision, "speculative")


def diff_check(name: str, plain: list[int], divergences: list[dict[str, Any]], precision: str, side: str) -> Check:
    """A greedy diff's verdict: it passes when every divergence is a near-tie; each is
    listed (with its request, where a batch ran several) with its top-two logit gap."""
    if not divergences:
        return Check(name, True, detail="identical", extra={"tokens": plain, "precision": precision})
    ok = all(d["near_tie"] for d in divergences)
    listed = "; ".join(
        f"{d['request'] + ' ' if 'request' in d else ''}token {d['at']}: {side} {d['speculative']} vs plain "
        f"{d['plain']}, top-two logit gap {d['gap_text']}" + ("" if d["near_tie"] else " — NOT a near-tie")
        for d in divergences)
    more = " (stopped looking)" if len(divergences) >= MAX_DIVERGENCES else ""
    verdict = ("" if not ok else ", at a near-tie" if len(divergences) == 1 else ", all at near-ties")
    detail = f"{len(divergences)} divergence{'s' if len(divergences) > 1 else ''}{verdict}{more}: {listed}"
    return Check(name, ok, detail=detail, extra={"plain": plain, "divergences": divergences, "precision": precision})


def _divergence(target: Backend, ids: list[int], plain: list[int], spec: list[int], i: int, at: int,
                precision: str) -> dict[str, Any]:
    """The target's top-two logits after ``ids + plain[:at]``, from a fresh prefill: a
    fault in the cache the runs left (a skipped rollback) must not bend the gap it is
    judged by."""
    target.reset()
    logits = target.forward(ids + plain[:at])[-1]
    top2 = torch.topk(logits.float(), 2).values.tolist()
    gap = top2[0] - top2[1]
    tolerance = near_tie_tolerance(precision, top2[0])
    return {"at": at, "speculative": spec[i] if i < len(spec) else "end", "plain": plain[at] if at < len(plain) else "end",
            "gap": gap, "top_logit": top2[0], "tolerance": tolerance, "near_tie": gap <= tolerance,
            "gap_text": describe_gap(gap, precision, top2[0])}
