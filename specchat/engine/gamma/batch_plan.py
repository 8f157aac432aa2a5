"""γ = auto for a batch: of the m drafts the batch could verify, a step takes the m
maximising goodput(m) = (N + S_m) / (w(R0) + e(m) + m·d) (docs/design/gamma.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from specchat.engine.gamma.acceptance import AcceptanceKey, acceptance_key, key_prior
from specchat.engine.gamma.controller import Assessment, Controller
from specchat.engine.gamma.cost_model import Ewma, fitted, line
from specchat.telemetry import RecentMedian
from specchat.engine.proposers import Candidate

PROBE_BUDGET = 0.01  # probes add at most this share of the plain steps' time
GAIN_MARGIN = 0.03  # a plan must be predicted this much faster than plain decoding
CALIBRATE_AFTER = 5  # drafting steps of a kind before their record scales its predictions
STALE_STEPS = 200  # a record not added to for this many steps is forgotten (conditions change)
PROBE_MAX = 4  # probes are never further apart than this many probe_every


class Record:
    """What drafting steps of one kind predicted and delivered: recent tokens and times,
    weighted alike, so their ratio is that of recent sums."""

    def __init__(self, decay: float = 0.05) -> None:
        self.last = 0  # the planner's step count at the last add
        self.tokens = (Ewma(decay=decay), Ewma(decay=decay))  # (predicted, came)
        self.time = (Ewma(decay=decay), Ewma(decay=decay))  # (predicted, took)

    def add(self, tokens: float, came: float, time: float, took: float) -> None:
        for ewma, x in zip(self.tokens + self.time, (tokens, came, time, took)):
            ewma.add(x)

    @property
    def factor(self) -> float:
        """Delivered over predicted goodput, at most 1; 1 before CALIBRATE_AFTER steps."""
        (tp, tc), (sp, st) = self.tokens, self.time
        if tc.seen < CALIBRATE_AFTER or not tp.value or not st.value:
            return 1.0
        return min(1.0, tc.value / tp.value * sp.value / st.value)


@dataclass(frozen=True)
class BatchPlan:
    """Drafts per sequence for one step, and the model's word on it: ``tokens`` E_i per
    sequence, ``cost`` the step's time in units of a plain step of the same sequences,
    ``gain`` its predicted goodput over plain decoding, ``marginal_ms`` e(1), what one draft
    adds to a plain step (None where not yet measured)."""

    drafts: list[int]
    tokens: list[float | None]
    cost: float | None
    gain: float | None
    marginal_ms: float | None
    planned: list[bool] = field(default_factory=list)  # per sequence: the plan chose (else its own controller)
    gains: list[float | None] = field(default_factory=list)  # per sequence: its own controller's predicted gain


class BatchGamma(Controller):
    """A controller's verbs over a whole step: it plans a batch's point-mass drafts under
    γ = auto at once (acceptance in the one cost model, steps timed by their rows); every
    other sequence, and a sequence alone, is its own controller's. ``BatchGamma(0)`` plans nothing."""

    def __init__(self, max_gamma: int, probe_every: int = 24, window: int = 9) -> None:
        self.max_gamma = max_gamma
        self.plain_ms: dict[int, RecentMedian] = {}  # pending rows → a plain step's time (decode and reading)
        self.extra_ms: dict[tuple[int, bool], RecentMedian] = {}  # (drafts, all alike) → what they added to plain
        self._shape = False  # the plan's drafts came every sequence alike (one pass)
        self.draft_ms = RecentMedian(window)  # per draft
        self.window = window
        self.probe_every = probe_every
        self.plain_run = 0
        self.expected = Ewma(decay=0.02)  # predicted gain of the steps as chosen (~50 steps)
        self._keys: list[AcceptanceKey | None] = []
        # (sequences, every sequence alike in one pass?; plain steps: None) → what such plans delivered
        self.records: dict[tuple[int, bool | None], Record] = {}
        self.steps = 0
        self._promised: tuple[int, float, float] | None = None  # the plan's (sequences, tokens, ms)

    def plans(self, seq, batch: int) -> bool:
        """Whether this plan chooses the sequence's drafts in a step of ``batch`` sequences:
        point masses under γ = auto, in a batch (a model's drafts cost its forwards, and alone
        the plan is AdaptiveGamma's E(k)/T(k): both their own controller's)."""
        p = seq.proposer
        auto = p is not None and p.point_mass and p.num_speculative_tokens == "auto"
        return auto and batch > 1 and self.max_gamma > 0

    def choose(self, seqs: list) -> BatchPlan:
        """The step's drafts per sequence: the plan's for those it ``plans``, each other's own
        controller's (rows that run anyway, to the plan)."""
        planned = [self.plans(s, len(seqs)) for s in seqs]
        own = [(0, None) if p or not s.proposer else s.controller.choose(s.ids) for s, p in zip(seqs, planned)]
        drafts = [max(0, min(g, s.cap())) for s, (g, _) in zip(seqs, own)]
        plan = BatchPlan(drafts, [None] * len(seqs), None, None, None)
        if any(planned):
            offers = [(s.proposer.candidates(s.ids, s.cap())[:1] or [None])[0] if p and s.cap() else None
                      for s, p in zip(seqs, planned)]
            plan = self.plan(offers, sum(len(s.ids) - s.cached for s in seqs) + sum(drafts))
            drafts = [d if p else g for d, g, p in zip(plan.drafts, drafts, planned)]
        return replace(plan, drafts=drafts, planned=planned, gains=[g for _, g in own])

    def assess(self, plan: BatchPlan, i: int, seq, k: int,
               source: str) -> tuple[Assessment, float | None, float | None]:
        """Sequence i's StepStats figures, asked before the step is observed: (assessment,
        predicted gain, e(1)); its own controller's where the plan did not choose for it."""
        if plan.planned[i]:
            return Assessment(plan.tokens[i], plan.cost, *self.recommendation()), plan.gain, plan.marginal_ms
        return seq.controller.assess(k, source), plan.gains[i], None

    def observe(self, plan: BatchPlan, seqs: list, done: list, rows: int, step_ms: float, draft_ms: float,
                prefill: bool) -> None:
        """The step as it went: ``done`` per sequence its (StepStats, Proposal), None where it
        failed; the plan measures its own, each other sequence's controller its own."""
        if any(plan.planned):
            self.observe_batch(rows, step_ms, draft_ms, prefill,
                               [(d[0].num_draft_tokens, d[0].num_accepted_tokens) if p and d else (0, 0)
                                for d, p in zip(done, plan.planned)])
        for s, d, p in zip(seqs, done, plan.planned):
            if d is not None and not p:
                s.controller.observe(*d)

    def plain_time(self, rows: int) -> float | None:
        """w(R): measured at R rows, else on the line through the sizes measured."""
        return fitted({x: e.value for x, e in self.plain_ms.items()}, rows)

    def extra_time(self, m: int, single: bool = False, table: tuple | None = None) -> float | None:
        """e(m), what m drafts add to a plain step (``single``: every sequence drafts alike, one
        pass): measured; else on the line through that kind's counts; else, one count m0
        measured, e(m0) up to m0 and in proportion beyond (a pass has a fixed cost); else a
        plain step of that many rows (a pass of its own). ``table``: :meth:`extras`, once a plan."""
        if m == 0:
            return 0.0
        known, fit = table or self.extras(single)
        if m in known:
            return known[m]
        if fit is not None:
            return max(0.0, fit[1] + fit[2] * (m - fit[0]))
        if known:
            (m0, e0), = known.items()
            return e0 if m <= m0 else e0 * m / m0
        return None if single else self.plain_time(m)  # single: the step's own size grows, unmeasured

    def extras(self, single: bool) -> tuple[dict[int, float], tuple[float, float, float] | None]:
        """The extras measured of one kind, by draft count, and the line through them."""
        table = {x: e.value for (x, one), e in self.extra_ms.items() if one == single}
        return table, line(table)

    def factor(self, n: int, single: bool) -> float:
        """What plans of this kind delivered over what they promised, beside what plain
        steps delivered over theirs; at most 1."""
        plain = self._record(n, None).factor
        return min(1.0, self._record(n, single).factor / plain) if plain else 1.0

    def _record(self, n: int, kind: bool | None) -> Record:
        """The record of plans of this kind at n sequences; a new one where none was kept
        in the last STALE_STEPS steps (so a bad stretch cannot stop a kind for good)."""
        record = self.records.get((n, kind))
        if record is None or self.steps - record.last > STALE_STEPS:
            record = self.records[(n, kind)] = Record()
            record.last = self.steps
        return record

    def probe_interval(self, w0: float, single: bool) -> int:
        """Plain steps between probes: ``probe_every``, or more where what one draft adds
        (``single``: beside no other sequence) would exceed PROBE_BUDGET of that many plain
        steps' time."""
        extra = self.extra_time(1, single)
        return max(self.probe_every, min(PROBE_MAX * self.probe_every, math.ceil(extra / (PROBE_BUDGET * w0))
                                         if extra else 0))

    def plan(self, offers: list[Candidate | None], pending_rows: int) -> BatchPlan:
        """``offers``: per sequence, what its proposer can draft (capped by its room) or None;
        ``pending_rows``: the rows the step runs anyway. Plans give the j sequences likeliest
        to keep k drafts k each: a ragged batch runs one extra pass of j·k rows (no unified KV
        cache: a pass per distinct tokens-per-sequence), all alike one pass of N·(1 + k)."""
        n = len(offers)
        self.steps += 1
        self._keys = [None if c is None or c.limit <= 0 else acceptance_key(c) for c in offers]
        survival = [[] if key is None else self.model.survival(key, min(c.limit, self.max_gamma), key_prior(key))
                    for c, key in zip(offers, self._keys)]
        w0, d = self.plain_time(pending_rows), self.draft_ms.value or 0.0
        alone = pending_rows == n  # one pending token each: no prompt in this step

        tables = {one: self.extras(one) for one in (False, True)}

        def predicted(j: int, k: int, kept: float) -> tuple[float, float] | None:
            """(goodput over plain, time in plain-step units) of j sequences drafting k."""
            one = alone and j == n
            extra = self.extra_time(j * k, one, tables[one])
            if w0 is None or extra is None:
                return None
            t = w0 + extra + j * k * d
            return (n + kept) / t * w0 / n * (self.factor(n, one) if j * k else 1.0), t / w0

        best: tuple[float, int, int, list[int]] | None = None  # (gain, j, k, sequences)
        unknown = False
        for k in range(1, max(map(len, survival), default=0) + 1):
            ranked = sorted(((sum(sv[:k]), i) for i, sv in enumerate(survival) if len(sv) >= k), reverse=True)
            kept = 0.0
            for j, (s, _) in enumerate(ranked, 1):
                kept += s
                guess = predicted(j, k, kept)
                unknown = unknown or guess is None
                if guess is not None and guess[0] > (best[0] if best else 1.0 + GAIN_MARGIN):
                    best = (guess[0], j, k, [i for _, i in ranked[:j]])
        top = max(range(n), key=lambda i: survival[i][0] if survival[i] else -1.0)
        chosen, k = ([], 0) if best is None else (best[3], best[2])
        if not chosen and survival[top]:
            self.plain_run += 1
            if w0 is not None and (unknown and predicted(1, 1, 0.0) is None or self.plain_run >= self.probe_interval(w0, alone and n == 1)):
                # explore what one draft adds, or look again now and then: conditions change
                self.plain_run, chosen, k = 0, [top], 1
        elif chosen:
            self.plain_run = 0
        drafts, tokens = [0] * n, [1.0] * n
        for i in chosen:
            drafts[i], tokens[i] = k, 1.0 + sum(survival[i][:k])
        self._shape = alone and len(chosen) == n
        gain, cost = predicted(len(chosen), k, sum(tokens) - n) or (None, None)
        self._promised = (n, sum(tokens), cost * w0) if cost is not None else None
        if gain is not None:
            self.expected.add(gain)
        return BatchPlan(drafts, tokens if gain is not None else [None] * n, cost, gain,
                         self.extra_time(1, alone and n == 1))  # alone, a draft shares the one pass

    def observe_batch(self, rows: int, step_ms: float, draft_ms: float, prefill: bool, verdicts: list[tuple[int, int]]) -> None:
        """The step just planned: its rows, time (drafting apart) and per sequence (drafts
        verified, kept); a plain step times w, a drafting one what its drafts added (a step
        that also ran a prompt, neither)."""
        drafted = sum(k for k, _ in verdicts)
        if not prefill:
            if not drafted:
                self.plain_ms.setdefault(rows, RecentMedian(self.window)).add(step_ms)
            elif (base := self.plain_time(rows - drafted)) is not None:
                key = (drafted, self._shape)
                self.extra_ms.setdefault(key, RecentMedian(self.window)).add(max(0.0, step_ms - base))
                self.draft_ms.add(draft_ms / drafted)
            if self._promised is not None:
                n, tokens, ms = self._promised
                record = self._record(n, self._shape if drafted else None)
                record.last = self.steps
                record.add(tokens, len(verdicts) + sum(kept for _, kept in verdicts), ms,
                           step_ms + draft_ms if drafted else step_ms)  # a draft's time is in its prediction
        self._promised = None
        for key, (k, kept) in zip(self._keys, verdicts):
            if key is not None and k:
                self.model.verdicts(key, key[0], k, kept, key_prior(key))

    def recommendation(self) -> tuple[int | str | None, float | None]:
        """"auto" where drafting is predicted to beat plain decoding in the steps lately
        planned, else 0; None before the model could predict."""
        gain = self.expected.value
        return (None, None) if gain is None else ("auto" if gain > 1.0 else 0, gain)
