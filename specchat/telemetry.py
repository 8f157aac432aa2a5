"""Speculation telemetry: one fold of every step's :class:`~specchat.events.StepStats`, live or
replayed. The cost model's figures are its per-step answers added up, not re-estimated.
Every metric defined: docs/design/metrics.md
"""

from __future__ import annotations

from collections import deque
from statistics import median
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from specchat.contention import BUSY_SHARE
from specchat.events import DraftCounts, StepEvent, StepStats, TurnStarted
from specchat.speedup import StepSums, measured_speedup


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """E(γ) = (1 − α^(γ+1)) / (1 − α) = 1 + α + … + α^γ (tokens per target pass)."""
    if gamma <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """E(γ) / (γ·c + v(γ)); with v = 1 this is the paper's E / (γ·c + 1)."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + verify_cost)


def arithmetic_increase(alpha: float, gamma: int, cost_ratio: float) -> float:
    """(1 − α)(γ·c + γ + 1) / (1 − α^(γ+1)): extra arithmetic per emitted token."""
    if alpha >= 1.0:
        return (gamma * cost_ratio + gamma + 1) / (gamma + 1)
    return (1.0 - alpha) * (gamma * cost_ratio + gamma + 1) / (1.0 - alpha ** (gamma + 1))


@dataclass(frozen=True)
class MetricsSnapshot:
    """The figures the panel, the recorder and bench show, each defined in docs/design/metrics.md."""

    num_steps: int = 0
    num_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    acceptance_histogram: tuple[int, ...] = ()
    per_position_acceptance: tuple[float, ...] = ()
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    alpha: float | None = None
    alpha_empirical: float | None = None
    target_token_ms: float | None = None
    draft_forward_ms: float | None = None
    cost_ratio: float | None = None
    verify_cost: dict[int, float] = field(default_factory=dict)
    gamma: float = 0.0
    expected_tokens_per_round: float | None = None
    predicted_speedup_paper: float | None = None
    predicted_speedup: float | None = None
    predicted_speedup_steps: float | None = None
    breakeven: bool | None = None
    speedup_lower_bound: float | None = None
    best_gamma: int | str | None = None
    recommended_gain: float | None = None
    verdict: str | None = None
    arithmetic_increase: float | None = None
    tokens_per_s: float | None = None
    plain_tokens_per_s: float | None = None
    measured_speedup: float | None = None
    ttft_ms: float | None = None
    last_gamma: int | None = None
    predicted_gain: float | None = None
    gamma_history: tuple[int, ...] = ()
    acceptance_history: tuple[float, ...] = ()
    drafts_by_source: dict[str, dict[str, float | None]] = field(default_factory=dict)
    measured_speedup_interval: tuple[float, float] | None = None
    measured_speedup_note: str = ""
    measured_speedup_busy: float | None = None
    busy_machine: bool | None = None
    cpu_others: float | None = None
    batch_size: int = 1
    marginal_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verify_cost"] = {str(k): v for k, v in self.verify_cost.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricsSnapshot:
        d = dict(d)
        d["verify_cost"] = {int(k): v for k, v in d.get("verify_cost", {}).items()}
        for key in ("acceptance_histogram", "per_position_acceptance", "gamma_history", "acceptance_history"):
            d[key] = tuple(d.get(key, ()))
        if d.get("measured_speedup_interval") is not None:
            d["measured_speedup_interval"] = tuple(d["measured_speedup_interval"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


class _Mean:
    __slots__ = ("total", "count")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, value: float, count: int = 1) -> None:
        self.total += value
        self.count += count

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


class RecentMedian:
    """Median of the last ``size`` times, the one rolling median (telemetry's, the cost
    model's and the batch plan's): one cold or interrupted step (a first call's kernel
    set-up, a GC pause, a busy neighbour, a draft model catching up on tokens it missed)
    cannot make a step look slow for good, and it follows the machine when its speed changes."""

    __slots__ = ("values",)

    def __init__(self, size: int = 64) -> None:
        self.values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def mean(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    @property
    def value(self) -> float | None:
        return median(self.values) if self.values else None


class Telemetry:
    """Folds :class:`StepStats` into a :class:`MetricsSnapshot`. ``max_gamma`` sizes the histogram;
    ``history`` bounds the per-step series the panel's sparklines show."""

    def __init__(self, max_gamma: int = 8, history: int = 200) -> None:
        self.max_gamma = max_gamma
        self._history = history
        self.reset()

    def reset(self) -> None:
        self.num_steps = 0
        self.num_tokens = 0
        self.drafts = DraftCounts()
        self.alpha = _Mean()
        self.plain_verify = RecentMedian()
        self.plain_total = RecentMedian()
        self.draft_forward = RecentMedian()
        # the cost model's c and v(k) as of the latest step that drafted (StepStats carries them)
        self.cost_ratio: float | None = None
        self.verify_cost: tuple[float, ...] = ()
        self.gamma_used = _Mean()
        self.elapsed_ms = 0.0
        self.ttft_ms: float | None = None
        self.last_gamma: int | None = None
        self.predicted_gain: float | None = None
        self._gamma_history: deque[int] = deque(maxlen=self._history)
        self._acceptance_history: deque[float] = deque(maxlen=self._history)
        self._by_source: dict[str, DraftCounts] = {}
        self._source_ms: dict[str, _Mean] = {}  # source → drafting ms per draft it timed
        self.decode = StepSums()  # the timed steps' tokens and times, for the interval
        self._others_ms = self._share_ms = 0.0  # Σ cpu_others × ms, Σ ms over steps that read it
        self.forecast_tokens = self.forecast_cost = 0.0  # Σ the cost model's E(k), T(k)/w(0)
        self.recommended: tuple[int | str | None, float | None] = (None, None)
        self.batch_size, self.marginal_ms = 1, None

    def start_turn(self) -> None:
        """Marks a new turn so the next step's time counts as time to first token."""
        self.ttft_ms = None

    def update(self, stats: StepStats, num_tokens: int) -> None:
        """Adds one step that emitted ``num_tokens`` tokens."""
        k, n, depth = stats.num_draft_tokens, stats.num_accepted_tokens, stats.depth
        self.num_steps += 1
        self.num_tokens += num_tokens
        self.elapsed_ms += stats.total_ms
        if self.ttft_ms is None:
            self.ttft_ms = stats.prefill_ms + stats.total_ms
        self._gamma_history.append(depth)
        self.last_gamma, self.predicted_gain = stats.num_speculative_tokens, stats.predicted_gain
        timed = stats.prefill_tokens == 0  # a step that also ran the prompt is no timing sample
        if timed:
            self.decode.add(num_tokens, stats.total_ms)
        if stats.recommended_gamma is not None:
            self.recommended = (stats.recommended_gamma, stats.recommended_gain)
        self.batch_size = stats.batch_size
        if stats.marginal_ms is not None:
            self.marginal_ms = stats.marginal_ms
        if timed and stats.predicted_tokens is not None and stats.predicted_cost is not None:
            self.forecast_tokens += stats.predicted_tokens
            self.forecast_cost += stats.predicted_cost
        if stats.cpu_others is not None:
            self._others_ms += stats.cpu_others * stats.total_ms
            self._share_ms += stats.total_ms
        if stats.cost_ratio is not None:
            self.cost_ratio = stats.cost_ratio
        if stats.verify_cost:
            self.verify_cost = stats.verify_cost
        if k == 0:
            if not timed:
                return
            self.plain_verify.add(stats.verify_ms)
            self.plain_total.add(stats.total_ms)
            return
        self.max_gamma = max(self.max_gamma, depth)
        self.drafts.add(stats)
        self._by_source.setdefault(stats.draft_source, DraftCounts()).add(stats)
        if stats.draft_catch_up_tokens == 0 and stats.prefill_tokens == 0:
            self._source_ms.setdefault(stats.draft_source, _Mean()).add(stats.draft_ms, k)
        self.alpha.add(stats.alpha_sum, stats.alpha_count)
        self.gamma_used.add(depth)
        self._acceptance_history.append(n / depth)
        if not timed or stats.draft_catch_up_tokens:
            return  # a draft time that includes running tokens the draft missed is no cost sample
        self.draft_forward.add(stats.draft_ms / stats.draft_forwards if stats.draft_forwards else stats.draft_ms)

    def snapshot(self) -> MetricsSnapshot:
        alpha = self.alpha.value
        drafts = self.drafts
        judged = drafts.num_accepted_tokens + drafts.num_rejected  # draft positions verified
        c = self.cost_ratio
        gamma_mean = self.gamma_used.value or 0.0
        gamma = max(1, round(gamma_mean)) if gamma_mean else 0
        expected = paper = lower = increase = breakeven = None
        if alpha is not None and gamma:
            expected = expected_tokens_per_round(alpha, gamma)
        if alpha is not None and c is not None and gamma:
            paper = predicted_speedup(alpha, gamma, c)
            breakeven = alpha > c
            lower = (1 + alpha) / (1 + c)
            increase = arithmetic_increase(alpha, gamma, c)
        predicted = self.forecast_tokens / self.forecast_cost if self.forecast_cost else None
        best, gain = self.recommended
        tps = self.num_tokens / (self.elapsed_ms / 1000) if self.elapsed_ms > 0 else None
        plain_ms = self.plain_total.mean
        others = self._others_ms / self._share_ms if self._share_ms > 0 else None
        honest = measured_speedup(self.decode, list(self.plain_total.values), others)
        histogram = drafts.acceptance_histogram + [0] * (self.max_gamma + 1 - len(drafts.acceptance_histogram))
        return MetricsSnapshot(
            num_steps=self.num_steps, num_tokens=self.num_tokens, num_drafts=drafts.num_drafts,
            num_draft_tokens=drafts.num_draft_tokens, num_accepted_tokens=drafts.num_accepted_tokens,
            acceptance_histogram=tuple(histogram), per_position_acceptance=drafts.per_position_acceptance,
            mean_acceptance_length=drafts.mean_acceptance_length, draft_acceptance_rate=drafts.draft_acceptance_rate,
            alpha=alpha, alpha_empirical=drafts.num_accepted_tokens / judged if judged else None,
            target_token_ms=self.plain_verify.value, draft_forward_ms=self.draft_forward.value, cost_ratio=c,
            verify_cost=dict(enumerate(self.verify_cost, 1)), gamma=gamma_mean,
            # the one cost model's answers, added up
            predicted_speedup=predicted, predicted_speedup_steps=predicted, best_gamma=best, recommended_gain=gain,
            verdict=None if best is None else "does not pay" if best == 0 else "pays",
            # the paper's, which ignore what verifying costs
            expected_tokens_per_round=expected, predicted_speedup_paper=paper, breakeven=breakeven,
            speedup_lower_bound=lower, arithmetic_increase=increase,
            tokens_per_s=tps, plain_tokens_per_s=1000.0 / plain_ms if plain_ms else None, ttft_ms=self.ttft_ms,
            measured_speedup=honest.value, measured_speedup_interval=honest.interval,
            measured_speedup_note=honest.note, measured_speedup_busy=honest.busy_value,
            busy_machine=None if others is None else others > BUSY_SHARE, cpu_others=others,
            batch_size=self.batch_size, marginal_ms=self.marginal_ms,
            last_gamma=self.last_gamma, predicted_gain=self.predicted_gain,
            gamma_history=tuple(self._gamma_history), acceptance_history=tuple(self._acceptance_history),
            drafts_by_source={name: {"drafted": s.num_draft_tokens, "accepted": s.num_accepted_tokens,
                                     "draft_ms_per_token": self._source_ms.get(name, _Mean()).value}
                              for name, s in self._by_source.items()})


def masked(snapshot: MetricsSnapshot, underivable: tuple[str, ...]) -> MetricsSnapshot:
    """``snapshot`` with the figures a source of steps cannot support (a server's draft
    cost, hence c and v(k)) set to None ({} for verify_cost), rather than to the 0 an
    unknown time would give."""
    fields = MetricsSnapshot.__dataclass_fields__
    return replace(snapshot, **{k: ({} if k == "verify_cost" else None) for k in underivable if k in fields})


class ChatTelemetry:
    """The one fold of a conversation's steps, this turn's and the whole session's, fed by the turn
    loop (:mod:`specchat.turn`) whatever the source; ``underivable``: see :func:`masked`."""

    def __init__(self, max_gamma: int = 8, underivable: tuple[str, ...] = ()) -> None:
        self.underivable = tuple(underivable)
        self.turn_telemetry = Telemetry(max_gamma=max_gamma)
        self.session_telemetry = Telemetry(max_gamma=max_gamma)

    def start_turn(self) -> None:
        self.turn_telemetry.reset()  # its time to first token too
        self.session_telemetry.start_turn()

    def update(self, stats: StepStats, num_tokens: int) -> None:
        self.turn_telemetry.update(stats, num_tokens)
        self.session_telemetry.update(stats, num_tokens)

    def replay(self, event: Any) -> None:
        """Folds a recorded event, as the turn loop folded it live (for sources of
        recorded events, which have no turn loop): a turn's start, or its steps."""
        if isinstance(event, TurnStarted):
            self.start_turn()
        elif isinstance(event, StepEvent):
            self.update(event.step.stats, len(event.step.tokens))

    @property
    def turn(self) -> MetricsSnapshot:
        return masked(self.turn_telemetry.snapshot(), self.underivable)

    @property
    def session(self) -> MetricsSnapshot:
        return masked(self.session_telemetry.snapshot(), self.underivable)

    def metrics(self) -> dict[str, Any]:
        """``TurnFinished.metrics``: {"turn": …, "session": …} as JSON-able dicts."""
        return {"turn": self.turn.to_dict(), "session": self.session.to_dict()}
