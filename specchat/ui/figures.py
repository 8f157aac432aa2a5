"""Panel figures and their text, pure Python. The panel shows the snapshots each source takes of
its own fold (:class:`Figures`, handed over by the worker that drives it) and folds no steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from specchat.events import StepEvent, TurnFinished, TurnStarted
from specchat.methods import METHODS
from specchat.telemetry import MetricsSnapshot

HIDDEN = "·"  # shown instead of wall-clock figures in deterministic (snapshot) mode


@dataclass(frozen=True)
class Figures:
    """A source's own snapshots (its one telemetry fold), taken on the worker thread that
    drives it. The app's marker between events: never shown as text, never recorded."""

    turn: MetricsSnapshot
    session: MetricsSnapshot


class FigureFeed:
    """When a worker takes its source's snapshots: at a turn's start, and while the turn
    streams at most every ``interval_s`` (the panel shows them at most once a second);
    a turn's end carries its own (``TurnFinished.metrics``)."""

    def __init__(self, source: Any, interval_s: float = 0.25) -> None:
        self.source = source
        self.interval_s = interval_s
        self._taken_at = -float("inf")

    def after(self, event: Any) -> Figures | None:
        if not isinstance(event, (TurnStarted, StepEvent)):
            return None
        now = time.perf_counter()
        if isinstance(event, StepEvent) and now - self._taken_at < self.interval_s:
            return None
        self._taken_at = now
        return Figures(self.source.turn_metrics, self.source.session_metrics)


class LiveFigures:
    """The panel's per-turn and whole-session snapshots, as the source sent them: its
    :class:`Figures` while a turn streams, then the turn's own (``TurnFinished.metrics``;
    for a replay, the recorded ones). The UI folds no steps itself."""

    def __init__(self) -> None:
        self.turn = MetricsSnapshot()
        self.session = MetricsSnapshot()
        self.turn_number: int | None = None

    def apply(self, event: Any) -> None:
        if isinstance(event, Figures):
            self.turn, self.session = event.turn, event.session
        elif isinstance(event, TurnStarted):
            self.turn_number = event.turn
        elif isinstance(event, TurnFinished):
            metrics = event.metrics or {}
            if "turn" in metrics:
                self.turn = MetricsSnapshot.from_dict(metrics["turn"])
            if "session" in metrics:
                self.session = MetricsSnapshot.from_dict(metrics["session"])


# --- text -------------------------------------------------------------------------


def fmt(value: float | int | None, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value}{suffix}"
    return f"{value:.{digits}f}{suffix}"


@dataclass(frozen=True)
class Row:
    label: str
    turn: str
    session: str


def rows_of(turn: MetricsSnapshot, session: MetricsSnapshot, hide_timing: bool, specs) -> list[Row]:
    """A row per (label, getter, digits, suffix, timing): this turn's and the session's."""
    return [Row(label, HIDDEN, HIDDEN) if timing and hide_timing
            else Row(label, fmt(getter(turn), digits, suffix), fmt(getter(session), digits, suffix))
            for label, getter, digits, suffix, timing in specs]


# the panel's table, always in view: what a reply cost and whether speculation paid
SUMMARY = [
    ("tokens", lambda m: m.num_tokens, 2, "", False),
    ("tok/s", lambda m: m.tokens_per_s, 1, "", True),
    ("mean accept len", lambda m: m.mean_acceptance_length, 2, "", False),
    ("draft accept rate", lambda m: m.draft_acceptance_rate, 2, "", False),
]
SPEEDUP = "measured speed-up"
# behind the "details" fold: the cost model's inputs and the paper's reference figures
DETAILS = [
    ("steps", lambda m: m.num_steps, 2, "", False),
    ("γ (mean)", lambda m: m.gamma if m.gamma else None, 1, "", False),
    ("α measured", lambda m: m.alpha, 2, "", False),
    ("α empirical", lambda m: m.alpha_empirical, 2, "", False),
    ("c (draft/target)", lambda m: m.cost_ratio, 3, "", True),
    ("v(γ) verify cost", lambda m: _verify_at_gamma(m), 2, "", True),
    ("E tokens/round", lambda m: m.expected_tokens_per_round, 2, "", False),
    ("paper (no verify)", lambda m: m.predicted_speedup_paper, 2, "×", True),
    ("predicted, as run", lambda m: m.predicted_speedup, 2, "×", True),
    ("time to 1st tok", lambda m: m.ttft_ms, 0, " ms", True),
]


def speedup_cell(m: MetricsSnapshot) -> str:
    """The measured speed-up as a table cell: "1.31×", a busy machine's "1.31×*" (its
    ratio, flagged), or "–*" where it cannot tell (too few steps, timing noise)."""
    if m.measured_speedup is not None:
        return f"{m.measured_speedup:.2f}×"
    if m.measured_speedup_busy is not None:
        return f"{m.measured_speedup_busy:.2f}×*"
    return "–*" if m.measured_speedup_note else "–"


def figure_rows(turn: MetricsSnapshot, session: MetricsSnapshot, hide_timing: bool = False) -> list[Row]:
    """The panel's table, always in view: (label, this turn, whole session). The measured
    speed-up carries its 95 % interval; where it is withheld or flagged the reason
    follows the table, each once (a busy machine's caveat covers both columns)."""
    rows = rows_of(turn, session, hide_timing, SUMMARY)
    if hide_timing:
        return rows + [Row(SPEEDUP, HIDDEN, HIDDEN)]
    rows.append(Row(SPEEDUP, speedup_cell(turn), speedup_cell(session)))
    shown = {name: f"{lo:.2f}–{hi:.2f}×" for name, m in (("turn", turn), ("session", session))
             if (m.measured_speedup is not None or m.measured_speedup_busy is not None)
             and m.measured_speedup_interval for lo, hi in [m.measured_speedup_interval]}
    if len(shown) == 2 and shown["turn"] == shown["session"]:  # one turn so far: one line
        shown = {"both": shown["turn"]}
    spread = [Row(f"  {'' if name == 'both' else name + ' '}95 %: {text}", "", "") for name, text in shown.items()]
    # the busy-machine caveat once for both columns, at the busiest share
    busy = [m.cpu_others or 0.0 for m in (turn, session) if m.measured_speedup_busy is not None]
    notes = [m.measured_speedup_note for m in (turn, session)
             if m.measured_speedup is None and m.measured_speedup_busy is None and m.measured_speedup_note]
    caveats = ([f"* busy machine: other processes used {max(busy):.0%} of the CPU, so the speed-up is rough"]
               if busy else []) + [f"* {note}" for note in dict.fromkeys(notes)]
    return rows + spread + [Row(text, "", "") for text in caveats]


def _verify_at_gamma(m: MetricsSnapshot) -> float | None:
    if not m.verify_cost:
        return None
    gamma = max(1, round(m.gamma)) if m.gamma else None
    return m.verify_cost.get(gamma, m.verify_cost[max(m.verify_cost)])  # the largest timed, past it


def gain_text(gain: float) -> str:
    """A predicted speed-up: two decimals, three within half a percent of 1 (so a model
    that predicts a sliver above plain speed never reads "1.00×" under "pays")."""
    return f"{gain:.3f}×" if abs(gain - 1.0) < 0.005 else f"{gain:.2f}×"


def breakeven_text(m: MetricsSnapshot, method: str = "draft_model", hide_timing: bool = False,
                   gamma: int | str | None = None) -> tuple[str, str]:
    """(is speculation paying, in words, "good" / "bad" / "unknown"): the cost model's verdict
    and prediction, the same recommendation recommended_gamma_text reads, and what γ = auto
    does about it (``gamma``: the γ the chat runs at, None if unknown)."""
    if hide_timing:
        return ("verdict needs timings (hidden in deterministic mode)", "unknown")
    if m.num_drafts == 0 and m.verdict is None:
        if method == "none":
            return ("no speculation in this profile: plain decoding", "unknown")
        return ("too early to say: no drafts yet", "unknown")
    if m.verdict is None:
        return ("too early to say: no plain step and draft timed yet", "unknown")
    gain = f" {gain_text(m.recommended_gain)}" if m.recommended_gain is not None else ""
    # whether any of the last 8 steps drafted (None before any): a plain calibration step
    # now and then does not make γ = auto look idle
    lately = any(m.gamma_history[-8:]) if m.gamma_history else None
    if m.verdict == "pays":
        text = f"speculation pays: γ {m.best_gamma} predicted{gain} plain speed"
        if gamma == "auto" and lately is False:
            text += "; for now γ auto decodes plainly (no draft pays at this point)"
        elif isinstance(gamma, int) and gamma != m.best_gamma:
            text += f"; you run γ {gamma} (F5/F6)"
        return (text, "good")
    if gamma == "auto":
        advice = "γ auto decodes plainly, probing now and then" + ("" if lately is False else " (probing now)")
    else:
        advice = "switch to n-gram" if method == "draft_model" else "turn speculation off"
    return (f"does not pay: predicted{gain} plain speed at best; {advice}", "bad")


def paper_text(m: MetricsSnapshot, hide_timing: bool = False) -> str:
    """The paper's α > c test, a reference that ignores what verifying costs ("" until measured)."""
    if hide_timing or m.breakeven is None:
        return ""
    sign = ">" if m.breakeven else "≤"
    return f"paper: α {m.alpha or 0.0:.2f} {sign} c {m.cost_ratio or 0.0:.2f} (no verify cost)"


def controller_text(m: MetricsSnapshot, hide_timing: bool = False) -> str:
    """The γ the engine is using now and, for γ = auto, why (its predicted gain); in a
    batch, under it, the chats decoded together and what a draft's row costs there."""
    # in a batch: the marginal cost γ = auto weighs a draft by, "batch: 4 chats, a draft's row +0.91 ms"
    cost = "" if m.marginal_ms is None or hide_timing else f", a draft's row +{m.marginal_ms:.2f} ms"
    batch = "" if m.batch_size <= 1 else f"\nbatch: {m.batch_size} chats{cost}"
    if m.last_gamma is None:
        return "γ now: –" + batch
    if m.predicted_gain is None or hide_timing:
        return f"γ now: {m.last_gamma}" + batch
    if m.last_gamma == 0:
        return "γ now: 0 (auto: no draft pays at this point; probing now and then)" + batch
    return f"γ now: {m.last_gamma} (auto: this step predicted {m.predicted_gain:.2f}× plain)" + batch


def recommended_gamma_text(m: MetricsSnapshot, hide_timing: bool = False) -> str:
    """The cost model's recommended γ (the one the verdict is about) and its prediction."""
    if hide_timing or m.best_gamma is None:
        return "recommended γ: –"
    if m.best_gamma == 0:
        return "recommended γ: 0, plain decoding (no γ beats it)"
    gain = f" (predicted {gain_text(m.recommended_gain)})" if m.recommended_gain is not None else ""
    return f"recommended γ: {m.best_gamma}{gain}"


def bar(fraction: float, width: int) -> str:
    """A horizontal bar with eighth-block resolution."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    return text.ljust(width)


def histogram_lines(histogram: tuple[int, ...], gamma: int = 0, width: int = 16) -> list[str]:
    """One line per accepted count 0..k, k the largest γ used: ``" 2 █████      7"``."""
    if not histogram or not any(histogram):
        return []
    # Bins beyond the largest γ used can only be zero: noise on a narrow panel.
    last = max((i for i, n in enumerate(histogram) if n), default=0)
    shown = histogram[: max(last, gamma) + 1]
    peak = max(shown) or 1
    return [f"{i:>2} {bar(n / peak, width)} {n:>4}" for i, n in enumerate(shown)]


def source_lines(by_source: dict[str, dict[str, float | None]]) -> list[str]:
    """Drafts per proposer, when more than one drafted (a hybrid), narrow enough for the
    panel: ``"head      5/24 kept  2.4 ms/draft"``. Names a recording carries are shown
    only if known."""
    if len(by_source) < 2:
        return []
    lines = ["by proposer (kept/drafted):"]
    for source, s in sorted(by_source.items()):
        cost = s.get("draft_ms_per_token")
        kept = f"{int(s.get('accepted') or 0)}/{int(s.get('drafted') or 0)}"
        name = METHODS[source].label if source in METHODS else "other"
        lines.append(f"{name:<7}{kept:>9}" + (f"  {cost:.1f} ms/draft" if cost is not None else ""))
    return lines


def position_lines(per_position: tuple[float, ...], width: int = 16) -> list[str]:
    return [f"{i + 1:>2} {bar(a, width)} {a:>4.2f}" for i, a in enumerate(per_position)]
