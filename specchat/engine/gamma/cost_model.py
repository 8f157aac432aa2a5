"""The one cost model: rate(k) = E(k) / T(k), expected tokens per ms of a step that drafts
k tokens, E(k) = 1 + Σ_j Π_{i<j} a_i, T(k) = k·d + w(k). γ = auto decides with it, every
controller writes its forecast into each StepStats, and ``specchat plan`` prices what it
times with :class:`MeasuredCosts`. Pure Python; definitions and reasoning: docs/design/gamma.md.
"""

from __future__ import annotations

import bisect
import copy
import operator
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from statistics import median

from specchat.events import StepStats
from specchat.telemetry import RecentMedian, predicted_speedup

Prior = float | list[float] | None  # a key's starting acceptance: one for every position, or per position


class Ewma:
    """Exponentially weighted mean that starts as a plain mean (no bias toward the prior
    once real observations exist). ``seen`` counts real observations."""

    __slots__ = ("value", "weight", "decay", "seen")

    def __init__(self, prior: float | None = None, decay: float = 0.05) -> None:
        # a prior counts as one observation, so the first real one only halves its pull
        self.value, self.weight, self.decay = prior, (1.0 if prior is not None else 0.0), decay
        self.seen = 0

    def add(self, x: float) -> None:
        self.seen += 1
        self.weight = min(self.weight + 1.0, 1.0 / self.decay)
        self.value = x if self.value is None else self.value + (x - self.value) / self.weight

    def loosen(self, weight: float) -> None:
        """Keeps the value but lets the next observations move it as if it rested on
        only ``weight`` of them."""
        self.weight = min(self.weight, weight)


# a drafting model's catch-up is spread over as many steps as the tokens it missed, at least
# this many (a probe's interval): why, with the pair's figures, in docs/design/gamma.md
CATCH_UP_HORIZON = 24
MIN_SPAN = 64  # tokens: plain steps closer than this in context say nothing of its slope
STALE_SPAN = 0.25  # a plain step timed this share of the context away (and MIN_SPAN) is due again


def plain_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(a, b) with w(0) ≈ a + b·context: b the median of the slopes between plain steps at
    least MIN_SPAN tokens apart (Theil–Sen; 0 until two are), kept within [0, min ms/context]
    so a ≥ 0 (a short span's slope cannot carry the line below zero), a the median of the rest."""
    slopes = [(m2 - m1) / (c2 - c1) for i, (c1, m1) in enumerate(points) for c2, m2 in points[i + 1:]
              if abs(c2 - c1) >= MIN_SPAN]
    steepest = min((m / c for c, m in points if c > 0), default=0.0)
    b = min(max(0.0, median(slopes)), steepest) if slopes else 0.0
    return median(m - b * c for c, m in points), b


def between(table: dict[int, float], context: int) -> float:
    """A cost timed at a few contexts (context → ms) read at ``context``: on the line
    between the two timed around it, the nearest one's outside them (no extrapolation)."""
    xs = sorted(table)
    i = bisect.bisect_left(xs, context)
    if i == 0 or i == len(xs):
        return table[xs[min(i, len(xs) - 1)]]
    x0, x1 = xs[i - 1], xs[i]
    return table[x0] + (table[x1] - table[x0]) * (context - x0) / (x1 - x0)


def line(values: dict[int, float]) -> tuple[float, float, float] | None:
    """(mean size, mean value, slope ≥ 0) of the least-squares line through the values
    measured per size; None until two sizes are."""
    pts = list(values.items())
    if len(pts) < 2:
        return None
    n = len(pts)
    mx = sum(a for a, _ in pts) / n
    my = sum(b for _, b in pts) / n
    sxx = sum((a - mx) ** 2 for a, _ in pts)
    slope = sum((a - mx) * (b - my) for a, b in pts) / sxx if sxx else 0.0
    return mx, my, max(0.0, slope)


def fitted(values: dict[int, float], x: int) -> float | None:
    """The value at size ``x``: measured where it was, else on the line through the sizes
    measured (never falling); None until two are."""
    if x in values:
        return values[x]
    fit = line(values)
    return None if fit is None else max(1e-3, fit[1] + fit[2] * (x - fit[0]))


class CostModel:
    """Measured acceptance per key and position, step times per k, draft times per source."""

    def __init__(self, max_gamma: int, prior: float = 0.6, window: int = 9, decay: float = 0.05,
                 by_context: bool = True) -> None:
        self.max_gamma = max_gamma
        self.prior = prior
        self.window = window  # step times kept per k and per source (their median is used)
        self.decay = decay  # of the acceptance estimates: ~1/decay recent verdicts weigh (bench: ~0, all)
        self.by_context = by_context  # False: every step as if at one context (a summary over runs)
        self.accept: dict[Hashable, list[Ewma]] = {}  # key → per-position a_i
        self.pooled: dict[str, list[Ewma]] = {}  # source → per-position a_i over every context
        self.step_ms: dict[int, deque[tuple[int, float]]] = {}  # k → recent (context, w(k)), whoever drafted
        self.context = 0  # tokens before the next step: what the predictions are for
        self._shape: tuple[tuple[float, float], dict[int, float]] | None = None  # (plain line, v by k) at the context
        self.draft_ms: dict[str, RecentMedian] = {}  # source → time per drafted token
        self.draft_step_ms: dict[str, dict[int, RecentMedian]] = {}  # source → k → a k-step's draft time
        self.drafting_share: dict[str, Ewma] = {}  # source → share of steps it drafted (n-gram misses)
        self.catch_ups: dict[str, deque[tuple[int, int, float]]] = {}  # source → (k, catch-up tokens, draft ms)
        self._w: dict[int, float | None] = {}  # w(k) as of the last observation

    def acceptance(self, key: Hashable, prior: Prior = None) -> list[Ewma]:
        """A key's estimates per draft position, made on first use from ``prior`` (one value,
        one per position with the last repeated, or None for the model's default)."""
        if key not in self.accept:
            starts = [self.prior] if prior is None else [prior] if isinstance(prior, (int, float)) else list(prior)
            self.accept[key] = [Ewma(starts[min(i, len(starts) - 1)], self.decay) for i in range(self.max_gamma)]
        return self.accept[key]

    def loosen(self, weight: float) -> None:
        for estimates in self.accept.values():
            for estimate in estimates:
                estimate.loosen(weight)

    def at(self, context_tokens: int) -> None:
        """The next step runs after ``context_tokens`` tokens: predict for that context."""
        if self.by_context and context_tokens != self.context:
            self.context = context_tokens
            self._w.clear()
            self._shape = None  # v(k) reads the k-steps timed near the context

    def plain_is_stale(self) -> bool:
        """Whether no recent plain step ran near this context (within STALE_SPAN of it, or
        MIN_SPAN tokens): the line would be read far from where it was measured."""
        plain = self.step_ms.get(0)
        if plain is None or not self.by_context:
            return False
        nearest = min(abs(c - self.context) for c, _ in plain)
        return nearest > max(MIN_SPAN, STALE_SPAN * self.context)

    def w(self, k: int) -> float | None:
        """w(k) in ms at the context, remembered until it or an observation changes."""
        if k not in self._w:
            self._w[k] = self._fit(k)
        return self._w[k]

    def _fit(self, k: int) -> float | None:
        if 0 not in self.step_ms:  # no plain step yet: the line through the sizes measured
            return fitted({x: median(ms for _, ms in t) for x, t in self.step_ms.items()}, k)
        if self._shape is None:
            a, b = plain_line(list(self.step_ms[0]))
            self._shape = (a, b), {x: median(ms / max(1e-3, a + b * c) for c, ms in self._near(t))
                                   for x, t in self.step_ms.items()}
        (a, b), v = self._shape
        ratio = fitted(v, k)
        return None if ratio is None else max(1e-3, a + b * self.context) * ratio

    def _near(self, points: deque[tuple[int, float]]) -> list[tuple[int, float]]:
        """The times taken near this context, by the rule that calls a plain step stale; all
        of them where none is (a k-step 1,300 tokens back once gave v(8) ≈ 28,000)."""
        near = [(c, ms) for c, ms in points if abs(c - self.context) <= max(MIN_SPAN, STALE_SPAN * self.context)]
        return near or list(points)

    def forecast(self, survival: list[float], source: str, behind: int = 0) -> list[tuple[float, float] | None]:
        """(E(k), T(k) in ms) for k = 0..len(survival), ``survival[i]`` the probability that
        draft i and all before it are kept (None where T(k) or the draft cost is unknown).
        ``behind``: context tokens the source must catch up on first, their time a share of
        T(k) for k ≥ 1, spread over max(CATCH_UP_HORIZON, behind) steps."""
        out: list[tuple[float, float] | None] = []
        expected, catch_up = 1.0, self.catch_up_ms(source, behind) / max(CATCH_UP_HORIZON, behind)
        for k in range(len(survival) + 1):
            if k:
                expected += survival[k - 1]
            w, d = self.w(k), self.drafting_ms(source, k) if k else 0.0
            out.append(None if w is None or d is None else (expected, d + w + (catch_up if k else 0.0)))
        return out

    def catch_up_ms(self, source: str, tokens: int) -> float:
        """The ms ``source`` takes to run ``tokens`` context tokens it missed: the recent
        catch-ups' draft time beyond D(k) over their tokens (a ratio of sums: small catch-ups'
        fixed part reads dear per token); 0 until one such step and its k's D(k) are timed."""
        extra = [(max(0.0, ms - d), n) for k, n, ms in self.catch_ups.get(source, ())
                 if (d := self.drafting_ms(source, k)) is not None] if tokens else []
        return tokens * sum(ms for ms, _ in extra) / sum(n for _, n in extra) if extra else 0.0

    def drafting_ms(self, source: str, k: int) -> float | None:
        """D(k), the ms ``source`` takes to draft k: as timed where a k-step was, else on the
        line through the k timed, else k times its time per draft (a step's drafting has a
        fixed part: priced per draft, k = 1 looked cheap; docs/design/gamma.md)."""
        timed = {j: t.value for j, t in self.draft_step_ms.get(source, {}).items()}
        d = fitted(timed, k)
        if d is None:
            draft = self.draft_ms.get(source)
            d = None if draft is None or draft.value is None else k * draft.value
        return d

    def survival(self, key: Hashable, limit: int, prior: Prior = None) -> list[float]:
        """The probability that drafts 1..i are all kept, for i = 1..limit."""
        return list(accumulate((estimate.value for estimate in self.acceptance(key, prior)[:limit]), operator.mul))

    def predicted_rates(self, key: Hashable, limit: int, source: str = "", prior: Prior = None,
                        behind: int = 0) -> list[float | None]:
        """Expected tokens per ms for k = 0..limit when ``source``, ``behind`` tokens behind,
        drafts under acceptance ``key`` (None where :meth:`forecast` has no figure)."""
        return [None if f is None else f[0] / f[1]
                for f in self.forecast(self.survival(key, limit, prior), source, behind)]

    def step_prediction(self, key: Hashable, k: int, source: str, prior: Prior = None,
                        behind: int = 0) -> tuple[float, float] | None:
        """(E(k), T(k)/w(0)) of the k a controller chose, None while unknown (bench's and the
        panel's predicted speed-up is Σ E / Σ T/w(0) over the steps as run)."""
        w0 = self.w(0)
        if k == 0 and (0 in self.step_ms or w0):  # a plain step is 1 for 1
            return 1.0, 1.0
        if not w0:
            return None
        survival = self.survival(key, k, prior)
        if len(survival) < k:  # more drafts than positions tracked (a wide tree): no forecast
            return None
        f = self.forecast(survival, source, behind)[k]
        return None if f is None else (f[0], f[1] / w0)

    def ratios(self, source: str) -> tuple[float | None, tuple[float, ...]]:
        """(c, v(1..K)) at the context, (None, ()) before w(0); v at least 1 (verifying k+1
        tokens never really costs less than one: below is timing noise)."""
        w0 = self.w(0)
        if not w0:
            return None, ()
        draft = self.draft_ms.get(source)
        c = draft.value / w0 if draft is not None and draft.value is not None else None
        top = max(self.step_ms, default=0)
        v = [self.w(k) for k in range(1, top + 1)]
        return c, tuple(max(1.0, w / w0) for w in v) if all(v) else ()

    def observe(self, stats: StepStats, key: Hashable, source: str, prior: Prior = None) -> None:
        """A finished step: its time (w(k), and d unless a prompt or a catch-up is in it)
        and, along the kept path, its acceptance under ``key`` and pooled for ``source``."""
        k, n = stats.num_draft_tokens, stats.num_accepted_tokens
        self.time(stats, source)
        if stats.num_speculative_tokens:  # drafts were asked for: did the source have any?
            self.drafting_share.setdefault(source, Ewma(decay=0.02)).add(1.0 if k else 0.0)
        if k == 0:
            return
        # a tree's k counts all its nodes; only the kept path's positions were judged
        self.verdicts(key, source, k if stats.verified_positions is None else stats.verified_positions, n, prior)

    def time(self, stats: StepStats, source: str) -> None:
        """A finished step's times alone: w(k), and d unless a prompt or a catch-up is in it."""
        k = stats.num_draft_tokens
        if stats.prefill_tokens:  # a step that also ran the prompt says nothing of T(k)
            return
        self.step_ms.setdefault(k, deque(maxlen=self.window)).append(
            (stats.context_tokens if self.by_context else 0, stats.total_ms - stats.draft_ms))
        self._w.clear()
        self._shape = None
        if k and stats.draft_catch_up_tokens:
            self.time_catch_up(stats, source)
        elif k:
            self.draft_ms.setdefault(source, RecentMedian(self.window)).add(stats.draft_ms / k)
            self.draft_step_ms.setdefault(source, {}).setdefault(k, RecentMedian(self.window)).add(stats.draft_ms)

    def time_catch_up(self, stats: StepStats, source: str) -> None:
        """A step's catch-up alone (its draft time beyond D(k), read when priced)."""
        self.catch_ups.setdefault(source, deque(maxlen=self.window)).append(
            (stats.num_draft_tokens, stats.draft_catch_up_tokens, stats.draft_ms))

    def adopt(self, other: "CostModel") -> None:
        """Takes ``other``'s step and draft times (the hardware's, whoever chose γ there)."""
        self.step_ms, self.draft_ms, self.draft_step_ms, self.catch_ups = copy.deepcopy(
            (other.step_ms, other.draft_ms, other.draft_step_ms, other.catch_ups))
        self._w.clear()
        self._shape = None

    def verdicts(self, key: Hashable, source: str, k: int, n: int, prior: Prior = None) -> None:
        """Acceptance along the kept path of k drafts of which the first n were kept, under
        ``key`` and pooled for ``source``."""
        acc = self.acceptance(key, prior)
        pooled = self.pooled.setdefault(source, [Ewma(decay=self.decay) for _ in range(self.max_gamma)])
        for i in range(min(k, n + 1, self.max_gamma)):  # positions verified on the kept path
            kept = 1.0 if i < n else 0.0
            acc[i].add(kept)
            pooled[i].add(kept)

    def pooled_survival(self, source: str, limit: int) -> list[float] | None:
        """Survival by position from the pooled acceptance, None before any draft of ``source``
        was verified; a position never verified takes the one before it (the paper's α)."""
        estimates = self.pooled.get(source)
        if not estimates or not estimates[0].seen:
            return None
        survival, alive, last = [], 1.0, estimates[0].value
        for estimate in estimates[:limit]:
            last = estimate.value if estimate.seen else last
            alive *= last
            survival.append(alive)
        return survival

    def recommend(self) -> tuple[int, float] | None:
        """(γ, gain): the best fixed γ in 1..max_gamma over every source that drafted, from the
        pooled acceptance (an n-gram miss stays plain whatever γ), its predicted speed-up,
        and γ 0 where that is not above 1; None until w(0) and a draft are timed."""
        if not self.pooled or not self.w(0):  # nothing drafted yet (plain decoding: every step)
            return None
        gains = [(gain, k) for source in sorted(self.pooled)
                 for k, gain in enumerate(self.gains(source, self.max_gamma) or [], 1) if gain is not None]
        if not gains:
            return None
        gain, k = max(gains, key=lambda g: g[0])  # the first of equals, as a running best keeps
        return (k if gain > 1.0 else 0), gain

    def ceiling(self, source: str, limit: int, behind: int = 0) -> float | None:
        """The best speed-up any k in 1..limit drafted by ``source`` (``behind`` tokens behind)
        could give if every draft were kept, over the k whose drafting and verifying were both
        timed (not off the lines beyond: docs/design/gamma.md). Below 1 no acceptance makes the
        source pay here. None until w(0), a k-step and two draft timings are measured."""
        w0, draft = self.w(0), self.draft_ms.get(source)
        if not w0 or draft is None or len(draft.values) < 2:
            return None
        timed = set(self.step_ms) & set(self.draft_step_ms.get(source, {}))
        forecast = self.forecast([1.0] * limit, source, behind)
        known = [f for k, f in enumerate(forecast) if k in timed and k and f is not None]
        return max(tokens / ms * w0 for tokens, ms in known) if known else None

    def gains(self, source: str, limit: int) -> list[float | None] | None:
        """Predicted speed-up of a fixed γ = 1..limit drafted by ``source`` on the share m of
        steps it drafted: (m·E + 1 − m) / (m·T/w(0) + 1 − m); None before w(0) and a draft."""
        survival = self.pooled_survival(source, limit)
        w0 = self.w(0)
        if survival is None or not w0:
            return None
        m = self.drafting_share.get(source, Ewma(1.0)).value
        return [None if f is None else (m * f[0] + 1 - m) / (m * f[1] / w0 + 1 - m)
                for f in self.forecast(survival, source)[1:]]


@dataclass(frozen=True)
class MeasuredCosts:
    """Costs timed at a few contexts L (``specchat plan``): ``step_ms[L][k]`` w(k), the
    target's ms to verify k drafts after L tokens (k = 0: a plain step); ``draft_ms[L]`` d;
    ``lookup_ms`` the proposer's ms in a step it drafts nothing for (a lookup that missed);
    ``outside_ms`` (plain decoding's, speculation's) ms a step spends outside its own timing.
    Read between timed contexts with :func:`between`, beyond the timed k with :func:`fitted`."""

    step_ms: dict[int, list[float]]
    draft_ms: dict[int, float]
    source: str
    spread: dict[int, float] | None = None  # per context: the widest (p75 − p25) / median of its points
    lookup_ms: float = 0.0
    outside_ms: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def from_report(cls, figures: dict) -> "MeasuredCosts":
        """The costs behind plan's figures (plan --json's)."""
        contexts = figures["contexts"]
        return cls({int(L): f["step_ms"] for L, f in contexts.items()},
                   {int(L): f["draft_ms"] for L, f in contexts.items()}, figures["source"],
                   lookup_ms=figures.get("lookup_ms") or 0.0,
                   outside_ms=tuple(figures.get("outside_ms") or (0.0, 0.0)))

    def c(self, context: int) -> float:
        return self.draft_ms[context] / self.step_ms[context][0]

    def v(self, context: int, k: int) -> float:
        return self.step_ms[context][k] / self.step_ms[context][0]

    def speedups(self, context: int, alphas: Sequence[float]) -> list[list[float]]:
        """[α][γ − 1]: E(γ) / (γ·c + v(γ)) at a timed context, γ = 1 up to the largest timed."""
        c, top = self.c(context), len(self.step_ms[context])
        return [[predicted_speedup(a, g, c, self.v(context, g)) for g in range(1, top)] for a in alphas]

    def break_even(self, context: int, gamma: int) -> float | None:
        """The α above which γ drafts a step pay at a timed context (None: not even at α → 1)."""
        def pays(alpha: float) -> bool:
            return predicted_speedup(alpha, gamma, self.c(context), self.v(context, gamma)) > 1.0

        lo, hi = 0.0, 0.999999
        if not pays(hi):
            return None
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if pays(mid) else (mid, hi)
        return hi

    def step(self, context: int, k: int) -> tuple[float, float]:
        """(w(0), T(k)) in ms after ``context`` tokens; T(0) is w(0) and a missed lookup."""
        top = min(len(steps) for steps in self.step_ms.values())
        w = {j: between({L: steps[j] for L, steps in self.step_ms.items()}, context) for j in range(top)}
        if not k:
            return w[0], w[0] + self.lookup_ms
        return w[0], k * between(self.draft_ms, context) + (fitted(w, k) or 0.0)  # T(k) = k·d + w(k)

    def as_run(self, steps: list[tuple[int, int, int]]) -> float | None:
        """The speed-up over plain decoding of ``steps`` (context, drafts verified, drafts kept)
        as a task ran them, each side paying its time outside a step too; None without a step."""
        plain = spec = 0.0
        for context, k, kept in steps:
            w0, t = self.step(context, k)
            plain += (kept + 1) * (w0 + self.outside_ms[0])
            spec += t + self.outside_ms[1]
        return plain / spec if spec else None
