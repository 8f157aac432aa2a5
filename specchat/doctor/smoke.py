"""``--smoke``: a few greedy tokens with speculation on (drafting every step) and off. They
must agree, or part only at a near-tie (verify/near_tie.py); ``specchat verify`` is the full check."""

from __future__ import annotations

import time
from typing import Any

from specchat.doctor.checks import FAIL, OK, Check, from_error
from specchat.errors import SpecchatError
from specchat.methods import REMOTE_BACKENDS

SMOKE_TOKENS = 16
SMOKE_GAMMA = 4  # drafts a step where the profile's γ is "auto"


def smoke(profile: Any) -> Check:
    if profile.target.backend in REMOTE_BACKENDS:
        return Check("smoke", OK, "not run: a server profile decodes on its server (`specchat run` tries it)")
    from specchat.loading import load_models

    started = time.perf_counter()
    try:
        loaded = load_models(profile)
    except SpecchatError as error:
        return from_error("smoke", error)
    load_s = time.perf_counter() - started
    import torch

    with torch.inference_mode():
        return _compare(profile, loaded, load_s)


def _compare(profile: Any, loaded: Any, load_s: float) -> Check:
    from specchat.engine import SpeculativeEngine
    from specchat.engine.factory import build_proposer
    from specchat.engine.sampling import SamplingParams
    from specchat.engine.template import ChatTemplate
    from specchat.verify.single import DEFAULT_PROMPT, DEFAULT_REPLY_START, EveryStep

    spec = profile.speculation
    gamma = spec.num_speculative_tokens if isinstance(spec.num_speculative_tokens, int) else SMOKE_GAMMA
    proposer = build_proposer(spec, loaded, gamma, gamma)
    plain_engine = SpeculativeEngine(loaded.target, None)
    # a reply that repeats itself, so lookup drafts are plausible and both kept and rejected
    ids = ChatTemplate.of(profile, loaded.tokenizer).prompt_ids([{"role": "user", "content": DEFAULT_PROMPT}])
    ids += list(loaded.tokenizer(DEFAULT_REPLY_START, add_special_tokens=False)["input_ids"])
    greedy = SamplingParams(temperature=0.0, seed=0)
    plain, plain_s, _ = _decode(plain_engine, ids, greedy)
    if proposer is None:
        return Check("smoke", OK, f"loaded in {load_s:.1f} s; {len(plain)} tokens in {plain_s:.2f} s "
                                  f"(method 'none': nothing to compare)")
    spec_engine = SpeculativeEngine(loaded.target, proposer, controller=EveryStep(gamma))
    spec_ids, spec_s, kept = _decode(spec_engine, ids, greedy)
    figure = (f"{len(spec_ids)} tokens, {kept} from accepted drafts (γ {gamma}), {spec_s:.2f} s speculative vs "
              f"{plain_s:.2f} s plain; loaded in {load_s:.1f} s")
    at = next((i for i, (a, b) in enumerate(zip(spec_ids, plain)) if a != b), None)
    if at is None and len(spec_ids) == len(plain):
        return Check("smoke", OK, f"speculative = plain greedy: {figure}")
    at = min(len(spec_ids), len(plain)) if at is None else at
    tie, gap = _near_tie(loaded.target, ids + plain[:at])
    if tie:
        return Check("smoke", OK, f"speculative = plain greedy up to a near-tie at token {at} (gap {gap}): {figure}")
    return Check("smoke", FAIL, f"speculative differs from plain greedy at token {at}, top-two logit gap {gap} "
                                f"(not a near-tie): {figure}",
                 f"run `specchat verify --profile {profile.name} --temperature 0` and report it")


def _decode(engine: Any, ids: list[int], params: Any) -> tuple[list[int], float, int]:
    """(token ids, seconds, how many came from accepted drafts)."""
    started = time.perf_counter()
    tokens = [t for step in engine.generate(ids, params, SMOKE_TOKENS) for t in step.tokens]
    return [t.id for t in tokens], time.perf_counter() - started, sum(t.kind == "accepted" for t in tokens)


def _near_tie(target: Any, prefix: list[int]) -> tuple[bool, str]:
    """Whether the target's top two logits after ``prefix`` (a fresh prefill) are a near-tie."""
    import torch

    from specchat.verify.near_tie import compute_precision, describe_gap, near_tie_tolerance

    precision = compute_precision(target)
    target.reset()
    top = torch.topk(target.forward(prefix)[-1].float(), 2).values.tolist()
    gap = top[0] - top[1]
    return gap <= near_tie_tolerance(precision, top[0]), describe_gap(gap, precision, top[0])
