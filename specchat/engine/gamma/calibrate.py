"""Timing a draft model before the first reply, for γ = auto: a few steps on a short random
prompt time the target's steps and the draft's, through ``step()``; only the times are kept
(docs/design/gamma.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, Callable

from specchat.engine.gamma.controller import AdaptiveGamma, Controller
from specchat.engine.sampling import SamplingParams
from specchat.events import StepStats

# γ per timed step: plain steps before and after the drafting ones (w(0) is every ratio's
# denominator, and plain steps right after a prompt alone read slow: docs/design/gamma.md)
SCRIPT = (0, 0, 0, 2, 2, 2, 1, 1, 0, 0)
# untimed steps first (right after a load, steps read slow); the first also runs the prompt,
# and its draft's catch-up over the prompt is timed (the cost model prices it)
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
