"""Timing a draft model before the first reply, for γ = auto.

When a chat's or a benchmark's engine is made, a few steps on a short random prompt time
the target's plain and k-draft steps and the draft's time per draft, through ``step()``.
Only the times are kept (acceptance on random ids says nothing of a chat); a draft model
that could not pay even if every draft were kept is set aside before the first reply.

Design notes: docs/design/gamma.md
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, Callable

from specchat.engine.gamma.controller import AdaptiveGamma, Controller
from specchat.engine.sampling import SamplingParams
from specchat.events import StepStats

# γ per step; the first also runs the prompt (untimed). Plain steps before and after the drafting
# ones: w(0) is every ratio's denominator, and two plain steps right after the prompt, alone,
# read slow often enough (a warming cache) to make a draft model that cannot pay look as if it
# could (the real pair at T = 0: set aside only after a probe's 370 ms catch-up, issue 56)
SCRIPT = (0, 0, 0, 2, 2, 2, 1, 1, 0, 0)
# untimed steps first: the first steps after a load read slow (pages and caches still cold), and
# plain ones come first, so w(0) read 29-40 ms against 27 warm on the pair, its ceiling 1.16-1.52
# where warm it is under 1.1 (and a probe later ran a 365 ms catch-up to find that out).
# The warm-up's draft runs over the prompt: that catch-up is timed (the cost model prices it)
WARMUP = (0, 2, 0, 1, 0)
PROMPT_TOKENS = 32


class _Script(Controller):
    """SCRIPT's γ each step, the draft model drafting; each step's times go to ``live``'s model."""

    def __init__(self, live: AdaptiveGamma, proposer: Any, source: str) -> None:
        self.live, self.proposer, self.source = live, proposer, source
        self.max_gamma = live.max_gamma
        self._gammas = iter(WARMUP + SCRIPT)
        self._untimed = len(WARMUP)

    def choose(self, ids: list[int]) -> tuple[int, float | None]:
        self.live.model.at(len(ids))
        self.proposer.select(self.source)
        return next(self._gammas, 0), None

    def observe(self, stats: StepStats, proposal: object) -> None:
        source = stats.draft_source or self.source
        if not self._untimed:
            self.live.model.time(stats, source)
        elif stats.draft_catch_up_tokens and not stats.prefill_tokens:
            self.live.model.time_catch_up(stats, source)
        self._untimed = max(0, self._untimed - 1)

    def prefills_proposer(self) -> bool:
        return False  # the draft runs over the prompt at its first draft (a catch-up, untimed)


def calibrate(engine: Any, params: SamplingParams | None = None, say: Callable[[str], None] | None = None,
              seed: int = 0) -> bool:
    """Times ``engine``'s draft model for its γ = auto controller, then sets it aside if it
    cannot pay; both caches are reset after. False (nothing run) unless the controller is
    γ = auto and the proposer drafts with a separate model. ``say``: a line as it starts."""
    live, proposer = engine.controller, engine.proposer
    source = proposer.drafting_model if proposer is not None else ""
    if not source or not isinstance(live, AdaptiveGamma):
        return False
    if say is not None:
        say(f"timing the {source.replace('_', ' ')} against the target for γ = auto ({len(WARMUP + SCRIPT)} steps)")
    rng = random.Random(seed)
    ids = [rng.randrange(engine.target.vocab_size) for _ in range(PROMPT_TOKENS)]
    params = dataclasses.replace(params or SamplingParams(temperature=0.0), seed=seed)
    eos, engine.eos_token_ids = engine.eos_token_ids, set()  # every step of the script runs
    engine.controller = _Script(live, proposer, source)
    try:
        # every draft may be kept: room for all, and the script's steps alone
        steps = WARMUP + SCRIPT
        for _ in itertools.islice(engine.generate(ids, params, max_new_tokens=sum(k + 1 for k in steps)), len(steps)):
            pass
    finally:
        engine.controller, engine.eos_token_ids = live, eos
        engine.reset()
    live.judge(source)
    return True
