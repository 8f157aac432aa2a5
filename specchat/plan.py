"""``specchat plan``: what speculation can pay on this machine, before any chat. c and v(k) belong
to the hardware and the model pair, α to the task: this times the target's steps verifying k = 0..8
drafts and the proposer's drafts, and prices them with the one cost model (MeasuredCosts) over
α × γ; for measured acceptance (``--alpha-from``) also the task's steps as run, the honest reading
for a proposer whose acceptance is not i.i.d. (prompt lookup keeps nearly all or none).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from specchat.engine.proposers import Proposal, Proposer
from specchat.engine.gamma.cost_model import MeasuredCosts

CONTEXTS = (256, 1024, 4096)
MAX_K = 8
ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
REPEATS = 7  # timed forwards per (context, k); their median is kept
NOISY = 0.15  # a point whose quartiles lie further apart than this share of its median is noise


def measure_target(target: Any, params: Any = None, contexts: tuple[int, ...] = CONTEXTS, max_k: int = MAX_K,
                   repeats: int = REPEATS, seed: int = 0,
                   progress: Callable[[str], None] | None = None) -> tuple[dict[int, list[float]], dict[int, float]]:
    """({L: [ms of a step verifying k = 0..max_k drafts after L tokens]} for each L that
    fits the target's context, {L: the widest relative spread of those points}).

    Each point is a step as the engine runs it, sampling at ``params`` (greedy when None):
    the forward, then sampling and verifying its k + 1 rows and rolling back, timed as
    the live cost model times a step (its time less the proposer's). The verification's
    share grows with k (a row each over the whole vocabulary), so a bare forward's ratio
    would under-state v(k). Random ids and random drafts (nearly always rejected): a
    step's time does not depend on the text. ``progress``: a line per (L, k) timed, as it
    ends (a large target takes minutes a context)."""
    from specchat.engine.engine import SpeculativeEngine
    from specchat.engine.gamma.controller import FixedGamma
    from specchat.engine.sampling import SamplingParams

    params = params or SamplingParams(temperature=0.0)
    rng = random.Random(seed)
    out, spread = {}, {}
    fits = [c for c in contexts if c + (max_k + 1) * (repeats + max_k + 4) <= target.max_length]
    for number, context in enumerate(fits, 1):
        ids = [rng.randrange(target.vocab_size) for _ in range(context)]
        target.reset()
        times = []
        for k in range(max_k + 1):
            proposer = RandomDrafts(k, target.vocab_size, seed) if k else None
            engine = SpeculativeEngine(target, proposer, controller=FixedGamma(k, calibrate_every=1 << 30),
                                       eos_token_ids=[])
            samples = [s.stats.total_ms - s.stats.draft_ms
                       for s in engine.generate(ids, params, max_new_tokens=repeats + k + 4)  # room for k drafts
                       if not s.stats.prefill_tokens and s.stats.num_draft_tokens == k][:repeats]
            times.append(statistics.median(samples))
            if progress is not None:
                progress(f"context {context} ({number}/{len(fits)}), k = {k} of {max_k}: {times[-1]:.1f} ms a step")
            if len(samples) >= 4:
                q = statistics.quantiles(samples, n=4)
                spread[context] = max(spread.get(context, 0.0), (q[2] - q[0]) / times[-1])
        out[context] = times
    target.reset()
    return out, spread


class RandomDrafts(Proposer):
    """k random point-mass drafts a step (verified as prompt lookup's are)."""

    kind = "random"
    point_mass = True

    def __init__(self, k: int, vocab_size: int, seed: int) -> None:
        super().__init__(k)
        self.vocab_size, self.rng = vocab_size, random.Random(seed)

    def propose(self, ids: list[int], k: int, params: Any, generator: Any) -> Proposal:
        import torch

        return Proposal(torch.tensor([self.rng.randrange(self.vocab_size) for _ in range(k)], dtype=torch.long), None)


class Drafting(NamedTuple):
    """Medians over a short generation: the proposer's time per draft, its time in a step
    it drafted nothing for (a lookup that missed: paid on every step γ = auto decodes
    plainly, which plain decoding never pays), a step's time outside its own timing, and a
    plain step's own time (the target's, at the contexts the drafts were timed at)."""

    per_draft_ms: float
    lookup_ms: float
    outside_ms: float
    plain_ms: float = 0.0


def measure_drafting(engine: Any, prompt_ids: list[int], tokens: int = 48) -> Drafting:
    """:class:`Drafting` over a short greedy generation of ``engine`` (with or without a
    proposer), steps that caught up on missed context or ran the prompt left out."""
    from specchat.engine.sampling import SamplingParams

    steps, last = [], time.perf_counter()
    for s in engine.generate(prompt_ids, SamplingParams(temperature=0.0), tokens):
        now = time.perf_counter()
        if not s.stats.prefill_tokens and not s.stats.draft_catch_up_tokens:
            steps.append((s.stats, max(0.0, (now - last) * 1000 - s.stats.total_ms)))
        last = now
    engine.reset()
    per_draft = [s.draft_ms / s.num_draft_tokens for s, _ in steps if s.num_draft_tokens]
    missed = [s.draft_ms for s, _ in steps if not s.num_draft_tokens]
    plain = [s.total_ms - s.draft_ms for s, _ in steps if not s.num_draft_tokens]
    median = lambda xs: statistics.median(xs) if xs else 0.0  # noqa: E731
    return Drafting(median(per_draft), median(missed) if engine.proposer else 0.0, median([o for _, o in steps]),
                    median(plain))


def draft_costs(drafting: Drafting, plain: Drafting, steps: dict[int, list[float]]) -> dict[int, float]:
    """The draft's time per draft at each timed context: c, its time over a plain step's
    where both were timed (one prompt, one context), held across contexts (a draft model's
    step grows with the context as its target's does). Pricing a draft timed after 60 tokens
    against a plain step after 256 read c 0.64 where bench, timing both in one reply, read
    0.76 (issue 56). Without a plain time, the draft's time as measured."""
    c = drafting.per_draft_ms / plain.plain_ms if plain.plain_ms else None
    return {context: drafting.per_draft_ms if c is None else c * times[0] for context, times in steps.items()}


def task_contexts(contexts: tuple[int, ...], steps: list[tuple[int, int, int]]) -> tuple[int, ...]:
    """``contexts``, and, where a tenth of a task's ``steps`` (context, drafts, kept) ran
    below the least of them, that tenth percentile too (down to a multiple of 32): costs
    are read on the line between timed contexts but held flat below the least, and a small
    model's verify cost relative to its plain step is largest at short context."""
    if not steps or not contexts:
        return contexts
    low = sorted(c for c, _, _ in steps)[len(steps) // 10] // 32 * 32
    return tuple(sorted({*contexts, low})) if 32 <= low < min(contexts) else contexts


def report(costs: MeasuredCosts, alphas: tuple[float, ...] = ALPHAS) -> dict:
    """Everything measured and predicted, as JSON-able figures."""
    first = min(costs.step_ms, default=0)
    out: dict[str, Any] = {"source": costs.source, "draft_ms": costs.draft_ms[first] if costs.step_ms else 0.0,
                           "lookup_ms": costs.lookup_ms, "outside_ms": list(costs.outside_ms), "contexts": {}}
    for context, steps in costs.step_ms.items():
        table = costs.speedups(context, alphas)
        out["contexts"][str(context)] = {
            "step_ms": steps, "draft_ms": costs.draft_ms[context], "c": costs.c(context),
            "v": [costs.v(context, k) for k in range(len(steps))],
            "alphas": list(alphas), "speedup": table,
            "break_even_alpha": [costs.break_even(context, g) for g in range(1, len(steps))],
            "best_gamma": [max(range(len(row)), key=row.__getitem__) + 1 if max(row) > 1.0 else 0 for row in table],
            "spread": (costs.spread or {}).get(context),
        }
    return out
