"""The measured speed-up of decoding, with its 95 % interval, or an honest "cannot tell" (a
busy machine, a ratio above the step bound, too few steps). Design notes: docs/design/speedup.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specchat.contention import BUSY_SHARE

MIN_PLAIN = 2
MIN_STEPS = 3
Z95 = 1.959964


def t95(df: int) -> float:
    """Student's t 97.5 % quantile (Cornish–Fisher expansion; within 1 % from df = 3)."""
    z = Z95
    df = max(1, df)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


class StepSums:
    """Running sums over timed steps of (tokens t, milliseconds m)."""

    __slots__ = ("n", "t", "m", "tt", "mm", "tm")

    def __init__(self) -> None:
        self.n = 0
        self.t = self.m = self.tt = self.mm = self.tm = 0.0

    def add(self, tokens: float, ms: float) -> None:
        self.n += 1
        self.t += tokens
        self.m += ms
        self.tt += tokens * tokens
        self.mm += ms * ms
        self.tm += tokens * ms


@dataclass(frozen=True)
class Measured:
    value: float | None
    interval: tuple[float, float] | None = None
    note: str = ""
    # a busy machine's ratio, withheld from ``value``: shown only beside its interval and
    # the caveat (the panel, a reply's footer), never alone as a result
    busy_value: float | None = None


def measured_speedup(steps: StepSums, plain_ms: list[float], others: float | None) -> Measured:
    """``steps``: every timed step of the span; ``plain_ms``: recent plain steps' times;
    ``others``: the share of the cores other processes used meanwhile (None: unknown)."""
    if steps.n < MIN_STEPS or len(plain_ms) < MIN_PLAIN or steps.m <= 0:
        return Measured(None, None, "too early to say: too few timed steps")
    m = len(plain_ms)
    plain = sum(plain_ms) / m
    rate = steps.t / steps.m  # tokens per ms
    value = rate * plain
    # Var(Σt/Σm) ≈ s² / (n · mean_m²), s² the variance of t − rate·m; Var(mean plain) = s_p² / m
    n = steps.n
    residual = max(0.0, steps.tt - 2 * rate * steps.tm + rate * rate * steps.mm) / max(1, n - 1)
    mean_m = steps.m / n
    rel_rate = residual / (n * mean_m * mean_m) / (rate * rate) if rate > 0 else math.inf
    spread = sum((x - plain) ** 2 for x in plain_ms) / (m - 1)
    rel_plain = spread / m / (plain * plain)
    # each part with Student's quantile for its own sample size (few plain steps: wider)
    half = math.sqrt(t95(n - 1) ** 2 * rel_rate + t95(m - 1) ** 2 * rel_plain)
    interval = (value * math.exp(-half), value * math.exp(half)) if math.isfinite(half) else None
    if others is not None and others > BUSY_SHARE:
        return Measured(None, interval, f"busy machine: other processes used {others:.0%} of the CPU, "
                                        "timings unreliable", busy_value=value)
    bound = steps.t / n
    if value > bound * (1 + 1e-9):
        return Measured(None, interval, f"cannot tell: {value:.2f}× is above the {bound:.2f} tokens a step "
                                        "allow — timing noise")
    return Measured(value, interval)
