"""``specchat verify``: is speculative sampling exact on these models and settings?

Draws ``samples`` seeded continuations of ``tokens`` tokens from the speculative engine
(one short ``generate`` per sample, seed = index) and as many from plain sampling (the
target alone, batched, with the same warp), and compares (see verify_stats for the rule):

1. first-token marginal, speculative vs the exact target distribution p = warp(logits);
2. the same for plain sampling (a check of the reference itself);
3. first two tokens, speculative vs the exact joint p(t1)·p(t2 | t1), enumerated over the
   most likely first tokens (the rest pooled);
4. whole K-token continuations, speculative vs plain (two-sample χ² and TV);
5. greedy (temperature 0): 32 tokens token by token, speculative vs plain; every divergence
   is reported with its top-two logit gap and accepted only at a numerical near-tie, whose
   width depends on the target's precision (near_tie.py: 1e-3 in float32, 8 ULPs in bf16).

``proposer_factory(loaded, profile, gamma) -> Proposer`` replaces the profile's proposer
(the hook tests use to plant a wrong sampler and see verify fail).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from specchat.bench.near_tie import compute_precision, describe_gap, near_tie_tolerance
from specchat.bench.verify_stats import Check, goodness_of_fit, two_sample
from specchat.engine import SpeculativeEngine
from specchat.engine.controller import Controller
from specchat.engine.sampling import SamplingParams, warp

# The default question and the start of its answer put the check where an n-gram draft
# is plausible but not certain: on the embedded model the first draft (" yes", copied
# from the reply so far) is kept about 40 % of the time, so samples exercise
# acceptance, rejection + resampling and bonus tokens within three tokens. (Starting
# from an empty reply, lookup drafts chat-template tokens that are never kept.)
DEFAULT_PROMPT = "Say 'yes' or 'no' ten times, at random."
DEFAULT_REPLY_START = "yes, no, yes, yes, no,"
GREEDY_TOKENS = 32
MAX_DIVERGENCES = 8  # reported at most, in the 32-token window
ENUMERATE_FIRST = 64  # first tokens whose second-token distribution is enumerated exactly
PLAIN_BATCH = 256
END = -1  # code of "no token: the sequence ended"


class EveryStep(Controller):
    """γ on every step: verify exercises the rejection sampler from the first token
    (the default controllers interleave plain calibration steps)."""

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def choose(self, telemetry, ids):
        return self.gamma, None


@dataclass
class VerifyReport:
    passed: bool
    checks: list[Check]
    settings: dict[str, Any]
    speculation: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def default_proposer(loaded: Any, profile: Any, gamma: int) -> Any:
    from specchat.engine import DraftModelProposer, NgramProposer

    spec = profile.speculation
    if spec.method == "draft_model":
        return DraftModelProposer(loaded.draft, gamma)
    if spec.method == "ngram":
        return NgramProposer(gamma, spec.prompt_lookup_min, spec.prompt_lookup_max)
    return None


def verify(loaded: Any, profile: Any, *, samples: int = 2000, tokens: int = 3, prompt: str = DEFAULT_PROMPT,
           reply_start: str = DEFAULT_REPLY_START, params: SamplingParams | None = None, gamma: int | None = None,
           proposer_factory: Callable[[Any, Any, int], Any] | None = None,
           progress: Callable[[int, int, str], None] | None = None) -> VerifyReport:
    from specchat.engine.chat import ChatSession
    from specchat.engine.factory import sampling_params

    report = progress or (lambda done, total, text: None)
    params = params or sampling_params(profile.sampling)
    spec = profile.speculation
    if gamma is None:
        gamma = spec.num_speculative_tokens if isinstance(spec.num_speculative_tokens, int) else spec.max_speculative_tokens
    factory = proposer_factory or default_proposer
    plain_engine = SpeculativeEngine(loaded.target, None)
    chat = ChatSession(plain_engine, loaded.tokenizer, system_prompt=profile.chat.system_prompt,
                       enable_thinking=profile.chat.enable_thinking)
    ids = chat.prompt_ids([{"role": "user", "content": prompt}])
    if reply_start:  # the assistant's answer so far: the samples continue it
        ids += list(loaded.tokenizer(reply_start, add_special_tokens=False)["input_ids"])
    eos = sorted(plain_engine.eos_token_ids)
    settings = {"samples": samples, "tokens": tokens, "gamma": gamma, "prompt": prompt, "reply_start": reply_start,
                "prompt_tokens": len(ids),
                "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                "method": spec.method, "dtype": str(next(loaded.target.parameters()).dtype).replace("torch.", ""),
                "precision": compute_precision(loaded.target)}
    checks: list[Check] = []
    spec_stats = {"drafted": 0, "accepted": 0, "rejected": 0, "bonus": 0}
    notes: list[str] = []
    if not params.greedy:
        engine = SpeculativeEngine(loaded.target, factory(loaded, profile, gamma), controller=EveryStep(gamma))
        spec_seqs = np.empty((samples, tokens), dtype=np.int64)
        for i in range(samples):
            if i % 50 == 0:
                report(i, samples * 2, "speculative samples")
            spec_seqs[i] = _speculative_sample(engine, ids, dataclasses.replace(params, seed=i), tokens, spec_stats)
        report(samples, samples * 2, "plain samples (batched)")
        plain_seqs, p_first = _plain_samples(loaded.target, ids, params, samples, tokens, eos)
        report(2 * samples, samples * 2, "exact distributions")
        exact_first = _distribution(p_first)
        checks.append(goodness_of_fit("speculative first token vs exact p", spec_seqs[:, 0], exact_first))
        checks.append(goodness_of_fit("plain first token vs exact p", plain_seqs[:, 0], exact_first))
        if tokens >= 2:
            joint = _exact_first_two(loaded.target, ids, params, p_first, eos, samples)
            vocab = p_first.shape[-1] + 1
            codes = _pair_codes(spec_seqs, vocab)
            checks.append(goodness_of_fit(f"speculative first two tokens vs exact joint "
                                          f"({len(joint)} cells enumerated)", codes, joint))
        codes = _sequence_codes(np.concatenate([spec_seqs, plain_seqs]))  # one code book for both
        checks.append(two_sample(f"speculative vs plain, {tokens}-token continuations",
                                 codes[:samples], codes[samples:]))
        if spec_stats["drafted"] == 0:
            checks.append(Check("speculation was exercised", False,
                                detail="no drafts were proposed: nothing was verified — for n-gram lookup "
                                       "use a --prompt / --reply-start whose answer repeats its words"))
        else:
            for path, count in (("accepted", spec_stats["accepted"]), ("rejected", spec_stats["rejected"])):
                if count == 0:
                    notes.append(f"note: no draft was {path} in any sample, so that path of the sampler went "
                                 f"unchecked — use a --prompt / --reply-start whose continuation repeats earlier "
                                 f"text without being certain")
    else:
        notes.append("temperature 0: greedy decoding, so only the token-by-token diff applies")
    report(2 * samples, 2 * samples, "greedy diff")
    checks.append(_greedy_diff(loaded, profile, factory, gamma, ids, params))
    return VerifyReport(all(c.passed for c in checks), checks, settings, spec_stats, notes)


def _speculative_sample(engine: SpeculativeEngine, ids: list[int], params: SamplingParams, tokens: int,
                        stats: dict[str, int]) -> list[int]:
    out: list[int] = []
    for step in engine.generate(ids, params, max_new_tokens=tokens):
        out += [t.id for t in step.tokens]
        stats["drafted"] += step.stats.num_draft_tokens
        stats["accepted"] += step.stats.num_accepted_tokens
        stats["rejected"] += sum(t.kind == "resampled" for t in step.tokens)
        stats["bonus"] += sum(t.kind == "bonus" for t in step.tokens)
    return (out + [END] * tokens)[:tokens]


@torch.inference_mode()
def _plain_samples(model: Any, ids: list[int], params: SamplingParams, n: int, k: int,
                   eos: list[int]) -> tuple[np.ndarray, torch.Tensor]:
    """n plain samples of k tokens, batched over a copy of the prompt's KV cache; also
    the exact first-token distribution p [V]."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(10**6)
    cache = DynamicCache(config=model.config)
    prompt = torch.tensor([ids], device=device)
    p_first = warp(model(input_ids=prompt, cache=cache, use_cache=True).logits[0, -1:], params)[0]  # [V]
    eos_t = torch.tensor(eos, device=device)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, PLAIN_BATCH):
        b = min(PLAIN_BATCH, n - start)
        batch_cache = copy.deepcopy(cache)
        for layer in batch_cache.layers:
            layer.batch_repeat_interleave(b)
        probs = p_first.expand(b, -1)
        alive = torch.ones(b, dtype=torch.bool, device=device)
        for j in range(k):
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [b]
            out[start:start + b, j] = torch.where(alive, token, END).cpu().numpy()
            alive &= ~torch.isin(token, eos_t)
            if j + 1 < k:
                logits = model(input_ids=token[:, None], cache=batch_cache, use_cache=True).logits[:, -1]
                probs = warp(logits, params)
    return out, p_first


def _distribution(p: torch.Tensor) -> dict[int, float]:
    nz = torch.nonzero(p > 0).flatten().tolist()
    values = p.double()[nz].tolist()
    return dict(zip(nz, values))


@torch.inference_mode()
def _exact_first_two(model: Any, ids: list[int], params: SamplingParams, p_first: torch.Tensor,
                     eos: list[int], samples: int) -> dict[int, float]:
    """Exact p(t1, t2) for the ENUMERATE_FIRST most likely t1 (pairs keyed as codes;
    a t1 that ends the sequence pairs with END)."""
    device = p_first.device
    vocab = p_first.shape[-1] + 1
    top = torch.topk(p_first, min(ENUMERATE_FIRST, int((p_first > 0).sum()))).indices.tolist()
    joint: dict[int, float] = {}
    continuing = [t for t in top if t not in eos]
    for t in top:
        if t in eos:
            joint[t * vocab + (END + 1)] = float(p_first[t])
    if continuing:
        batch = torch.tensor([ids + [t] for t in continuing], device=device)
        logits = model(input_ids=batch).logits[:, -1]  # [B, V]
        p_second = warp(logits, params).double()
        for row, t in enumerate(continuing):
            p1 = float(p_first[t])
            for t2 in torch.nonzero(p_second[row] > 0).flatten().tolist():
                joint[t * vocab + t2 + 1] = p1 * float(p_second[row, t2])
    return joint


def _pair_codes(seqs: np.ndarray, vocab: int) -> np.ndarray:
    return seqs[:, 0] * vocab + (seqs[:, 1] + 1)


def _sequence_codes(seqs: np.ndarray) -> np.ndarray:
    _, codes = np.unique(seqs, axis=0, return_inverse=True)
    return codes.reshape(-1)


@torch.inference_mode()
def _greedy_diff(loaded: Any, profile: Any, factory: Callable, gamma: int, ids: list[int],
                 params: SamplingParams) -> Check:
    """Greedy speculative vs greedy plain, token by token. After a divergence the
    speculative run resumes from plain's prefix (plain's token included), so every
    divergence in the window is found and reported with its top-two logit gap; the
    check passes when each is a near-tie for the target's precision (near_tie.py)."""
    greedy = dataclasses.replace(params, temperature=0.0, seed=0)
    spec_engine = SpeculativeEngine(loaded.target, factory(loaded, profile, gamma), controller=EveryStep(gamma))
    plain_engine = SpeculativeEngine(loaded.target, None)
    plain = [t.id for s in plain_engine.generate(ids, greedy, GREEDY_TOKENS) for t in s.tokens]
    precision = compute_precision(loaded.target)
    divergences: list[dict[str, Any]] = []
    start = 0
    while start < len(plain) and len(divergences) < MAX_DIVERGENCES:
        spec = [t.id for s in spec_engine.generate(ids + plain[:start], greedy, len(plain) - start) for t in s.tokens]
        at = next((start + i for i, (a, b) in enumerate(zip(spec, plain[start:])) if a != b), None)
        if at is None and len(spec) == len(plain) - start:
            break
        if at is None:  # one run stopped (EOS) where the other went on
            at = start + min(len(spec), len(plain) - start)
        divergences.append(_divergence(loaded.target, ids, plain, spec, at - start, at, precision))
        start = at + 1
    name = f"greedy token-by-token diff ({len(plain)} tokens, {precision})"
    if not divergences:
        return Check(name, True, detail="identical", extra={"tokens": plain, "precision": precision})
    ok = all(d["near_tie"] for d in divergences)
    listed = "; ".join(
        f"token {d['at']}: speculative {d['speculative']} vs plain {d['plain']}, top-two logit gap {d['gap_text']}"
        + ("" if d["near_tie"] else " — NOT a near-tie") for d in divergences)
    more = " (stopped looking)" if len(divergences) == MAX_DIVERGENCES else ""
    verdict = ("" if not ok else ", at a near-tie" if len(divergences) == 1 else ", all at near-ties")
    detail = f"{len(divergences)} divergence{'s' if len(divergences) > 1 else ''}{verdict}{more}: {listed}"
    return Check(name, ok, detail=detail, extra={"plain": plain, "divergences": divergences, "precision": precision})


def _divergence(model: Any, ids: list[int], plain: list[int], spec: list[int], i: int, at: int,
                precision: str) -> dict[str, Any]:
    """The target's top-two logits after ``ids + plain[:at]`` (from a fresh forward)."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids + plain[:at]], device=device)).logits[0, -1]
    top2 = torch.topk(logits.float(), 2).values.tolist()
    gap = top2[0] - top2[1]
    return {"at": at, "speculative": spec[i] if i < len(spec) else "end", "plain": plain[at] if at < len(plain) else "end",
            "gap": gap, "top_logit": top2[0], "tolerance": near_tie_tolerance(precision, top2[0]),
            "near_tie": gap <= near_tie_tolerance(precision, top2[0]),
            "gap_text": describe_gap(gap, precision, top2[0])}
