"""Choosing γ, the number of drafts, before each step.

Exactness does not depend on the choice as long as it uses only the past (tokens so
far and timings), which both controllers here do. With n-gram lookup the choice does
not even change a seeded reply, only its speed (the coupled form in sampling.py).

* :class:`FixedGamma` always asks for γ, except for occasional plain calibration steps
  that measure the single-token target time the cost model needs.
* :class:`AdaptiveGamma` picks the k in 0..max that maximises expected tokens per
  millisecond, E(k) / T(k), from online estimates of the conditional acceptance of each
  draft position (for n-gram lookup: per bucket of match length and consensus of the
  n-gram's earlier occurrences, and no drafts at all without a match) and of the
  measured step time T(k) (draft + verify + overhead).
  Each bucket starts from a prior that grows with the match length (:func:`match_prior`),
  so a long quote is drafted deep from its first step while a one-token match waits for
  evidence; where verifying is dear (two CPU cores: 5 drafts cost ~1.5 plain steps with
  specchat's llama.cpp kernels, 2–2.7 with upstream's) that is the difference between
  drafting where it pays and paying to learn where.
  When no k beats a plain step it decodes plainly and probes again from time to time.

It must recover when acceptance comes back after a stretch where nothing was accepted:
a draft model skipped during plain steps catches up on the tokens it missed at the next
probe, and that catch-up time is no sample of the draft's cost (else the estimate grows
with each plain stretch and speculation never looks worth it again); a probe whose draft
is kept is followed at once by another, so the acceptance estimate climbs back within a
few steps; and the wait between failed probes doubles only up to a cap.
"""

from __future__ import annotations

from specchat.engine.ngram import NgramMatch
from specchat.engine.proposers import Candidate, Proposer
from specchat.events import StepStats
from specchat.telemetry import Telemetry


class Controller:
    def start_turn(self) -> None:
        """A new ``generate`` call begins."""

    def choose(self, telemetry: Telemetry, ids: list[int]) -> tuple[int, float | None]:
        """(γ for the next step, predicted gain over a plain step or None)."""
        raise NotImplementedError

    def observe(self, stats: StepStats, proposal: object) -> None:
        """The finished step's measurements."""

    def prefills_proposer(self) -> bool:
        """Whether the proposer should run over the prompt before the first step (a draft
        model's KV cache); a proposer that is not prefilled catches up when next asked."""
        return True


class FixedGamma(Controller):
    """γ every step, except a plain calibration step second in every turn and then every
    ``calibrate_every`` steps, so the single-token target time behind c and v(k) is always
    measured, never assumed. The schedule depends only on the step's index in the turn,
    so a seed reproduces a sampled reply exactly."""

    def __init__(self, gamma: int, calibrate_every: int = 64) -> None:
        self.gamma = gamma
        self.calibrate_every = calibrate_every
        self.steps = 0

    def start_turn(self) -> None:
        self.steps = 0

    def choose(self, telemetry: Telemetry, ids: list[int]) -> tuple[int, float | None]:
        self.steps += 1
        # step 1 also runs the prompt, so it cannot time a plain step: calibrate on step 2
        return (0 if self.steps % self.calibrate_every == 2 else self.gamma), None

    def prefills_proposer(self) -> bool:
        return self.gamma > 0


class _Ewma:
    """Exponentially weighted mean that starts as a plain mean (no bias toward the prior
    once real observations exist)."""

    __slots__ = ("value", "weight", "decay")

    def __init__(self, prior: float | None = None, decay: float = 0.05) -> None:
        # a prior counts as one observation, so the first real one only halves its pull
        self.value, self.weight, self.decay = prior, (1.0 if prior is not None else 0.0), decay

    def add(self, x: float) -> None:
        self.weight = min(self.weight + 1.0, 1.0 / self.decay)
        self.value = x if self.value is None else self.value + (x - self.value) / self.weight

    def loosen(self, weight: float) -> None:
        """Keeps the value but lets the next observations move it as if it rested on
        only ``weight`` of them."""
        self.weight = min(self.weight, weight)


class _RecentMedian:
    """Median of the last few step times: one cold or interrupted step (a first call's
    kernel set-up, a busy neighbour, a draft model catching up on the tokens it missed
    while the controller decoded plainly) cannot make a draft length look slow for good."""

    __slots__ = ("values",)

    def __init__(self, size: int = 9) -> None:
        from collections import deque

        self.values = deque(maxlen=size)

    def add(self, x: float) -> None:
        self.values.append(x)

    @property
    def value(self) -> float | None:
        ordered = sorted(self.values)
        return ordered[len(ordered) // 2] if ordered else None


MATCH_BUCKETS = (1, 2, 3, 4, 5, 8, 16)  # lower ends: 1, 2, 3, 4, 5–7, 8–15, 16+
MatchKey = tuple[int, str]  # (agreement bucket, consensus); () for a model's drafts
AcceptanceKey = tuple[str, MatchKey | tuple[()]]  # (source, match key)


def length_bucket(length: int) -> int:
    """The lower end of an agreement length's bucket (0 for none)."""
    key = 0
    for low in MATCH_BUCKETS:
        if length >= low:
            key = low
    return key


def match_key(match: NgramMatch) -> MatchKey:
    """The acceptance estimates an n-gram match shares: its agreement bucket and whether
    the n-gram's other occurrences went on alike (ngram.py)."""
    return length_bucket(match.length), match.consensus


def match_prior(key: MatchKey) -> float:
    """Prior probability that a draft is kept after a match: by agreement length L,
    1 − 0.8 / L^0.8 — 0.20 at 1, 0.54 at 2, 0.74 at 4, 0.85 at 8, 0.91 at 16 — for a lone
    occurrence; a third of the way from there to certainty where every other occurrence went
    on alike, half of it where they went different ways. Fitted loosely to the first-draft
    acceptance on our prompt sets (ngram.py), as a starting point that a few of the reply's
    own verdicts outweigh."""
    length, consensus = key
    alone = 1.0 - 0.8 / length ** 0.8
    if consensus == "agreed":
        return 1.0 - (1.0 - alone) * 0.35
    if consensus == "split":
        return alone * 0.5
    return alone


class AdaptiveGamma(Controller):
    """Picks k ∈ 0..max_gamma maximising E(k)/T(k) (see the module docstring).

    E(k) = 1 + Σ_{j=1..k} Π_{i<j} a_i, where a_i is the estimated probability that draft i
    is accepted given the drafts before it were; T(k) = k·d + w(k) is the step time in ms,
    d the draft time per drafted token and w(k) the rest of a step that verifies k drafts
    (measured per k; a line fitted through the measured k elsewhere).
    """

    def __init__(self, max_gamma: int, proposer: Proposer | None = None, probe_every: int = 24,
                 prior_acceptance: float = 0.6, calibrate_every: int = 64, turn_weight: float = 4.0) -> None:
        self.max_gamma = max_gamma
        self.proposer = proposer
        self.probe_every = probe_every
        self.prior = prior_acceptance
        self.accept: dict[AcceptanceKey, list[_Ewma]] = {}  # (source, match key) → per-position a_i
        self.step_ms: dict[int, _RecentMedian] = {}  # k → w(k), whoever drafted
        self.draft_ms: dict[str, _RecentMedian] = {}  # source → time per drafted token
        self.plain_run = 0
        self.probe_after = probe_every  # plain steps before the next probe (backs off)
        self.max_probe_after = 8 * probe_every  # the back-off's cap: a probe at least this often
        self._probing = False
        self.speculative_run = 0
        self.calibrate_every = calibrate_every
        self.since_plain = 0
        self.turn_weight = turn_weight
        self._key: AcceptanceKey = ("", ())

    def start_turn(self) -> None:
        # a new reply may quote far more or far less than the last one: acceptance learnt
        # there is kept as the starting point, but a few of this reply's drafts outweigh it
        for estimates in self.accept.values():
            for estimate in estimates:
                estimate.loosen(self.turn_weight)

    def _acceptance(self, key: AcceptanceKey) -> list[_Ewma]:
        if key not in self.accept:
            prior = match_prior(key[1]) if key[1] else self.prior
            self.accept[key] = [_Ewma(prior) for _ in range(self.max_gamma)]
        return self.accept[key]

    def _w(self, k: int) -> float | None:
        if k in self.step_ms:
            return self.step_ms[k].value
        pts = [(kk, e.value) for kk, e in self.step_ms.items()]
        if len(pts) < 2:
            return None
        n = len(pts)
        mx = sum(x for x, _ in pts) / n
        my = sum(y for _, y in pts) / n
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
        return max(1e-3, my + max(0.0, slope) * (k - mx))

    def predicted_rates(self, key: AcceptanceKey, limit: int, source: str = "") -> list[float | None]:
        """Expected tokens per ms for k = 0..limit when ``source`` drafts (None where T(k)
        or its draft cost is unknown)."""
        acc = self._acceptance(key)
        draft_ms = self.draft_ms.get(source)
        rates: list[float | None] = []
        expected, survive = 1.0, 1.0
        for k in range(limit + 1):
            if k:
                survive *= acc[k - 1].value
                expected += survive
            w = self._w(k)
            d = (draft_ms.value if draft_ms is not None else None) if k else 0.0
            rates.append(None if w is None or (k and d is None) else expected / (k * d + w))
        return rates

    def choose(self, telemetry: Telemetry, ids: list[int]) -> tuple[int, float | None]:
        # n-gram: a miss means nothing to verify, and the match informs a_i; a hybrid
        # offers the head beside it, with its own acceptance and cost (hybrid.py)
        candidates = self.proposer.candidates(ids, self.max_gamma) if self.proposer else [Candidate("", self.max_gamma)]
        if not candidates:
            return 0, None
        self.since_plain += 1
        if 0 not in self.step_ms or self.since_plain >= self.calibrate_every:
            return 0, None  # (re)measure a plain step: the baseline every gain is relative to
        best: tuple[float, int, Candidate] | None = None
        unexplored: Candidate | None = None
        for candidate in candidates:
            rates = self.predicted_rates(self._key_of(candidate), candidate.limit, candidate.source)
            known = [(r, k) for k, r in enumerate(rates) if r is not None]
            if len(known) < 2:
                unexplored = unexplored or candidate
                continue
            rate, k = max(known)
            if best is None or rate > best[0]:
                best = (rate, k, candidate)
        w0 = self._w(0)
        plain = 1.0 / w0 if w0 else None
        if unexplored is not None and (best is None or best[1] == 0):
            # explore: measure one speculative step size (of a source not yet timed)
            self._use(unexplored)
            return min(unexplored.limit, 2 + len(self.step_ms) - 1), None
        best_rate, best_k, chosen = best
        self._use(chosen)
        if best_k == 0:
            self.plain_run += 1
            if self.plain_run >= self.probe_after:  # conditions change: look again
                self.plain_run = 0
                self._probing = True  # observe() sets the wait for the next probe
                self._use(self._probe_source(candidates))
                return 1, None
            return 0, 1.0
        self.plain_run = 0
        self.probe_after = self.probe_every
        self.speculative_run += 1
        if self.speculative_run % self.probe_every == 0:
            # keep the neighbours' estimates fresh: a length measured badly once (or on
            # another context length) would otherwise never be tried again
            neighbour = best_k + 1 if best_k < chosen.limit else best_k - 1
            if neighbour >= 1:
                rates = self.predicted_rates(self._key_of(chosen), chosen.limit, chosen.source)
                return neighbour, rates[neighbour] / plain if rates[neighbour] and plain else None
        return best_k, best_rate / plain if plain else None

    def _key_of(self, candidate: Candidate) -> AcceptanceKey:
        return candidate.source, (match_key(candidate.match) if candidate.match is not None else ())

    def _use(self, candidate: Candidate) -> None:
        self._key = self._key_of(candidate)
        if self.proposer is not None:
            self.proposer.select(candidate.source)

    def _probe_source(self, candidates: list[Candidate]) -> Candidate:
        """The source a probe tries: the one whose single draft is predicted best."""
        def one_draft(candidate: Candidate) -> float:
            rates = self.predicted_rates(self._key_of(candidate), 1, candidate.source)
            return rates[1] if len(rates) > 1 and rates[1] is not None else 0.0
        return max(candidates, key=one_draft)

    def prefills_proposer(self) -> bool:
        # while speculation does not pay, a draft model's pass over each new prompt is
        # wasted time to first token; the next probe lets it catch up instead
        return self.plain_run == 0

    def observe(self, stats: StepStats, proposal: object) -> None:
        k, n = stats.num_draft_tokens, stats.num_accepted_tokens
        if self._probing:
            self._probing = False
            if k and n:  # its draft was kept: look again at once, the estimate is catching up
                self.probe_after = 1
            else:  # it did not pay: wait twice as long next time, up to the cap
                self.probe_after = min(max(self.probe_after, self.probe_every // 2) * 2, self.max_probe_after)
        if stats.prefill_tokens == 0:  # a step that also ran the prompt says nothing of T(k)
            self.step_ms.setdefault(k, _RecentMedian()).add(stats.total_ms - stats.draft_ms)
        if k == 0:
            self.since_plain = 0
            return
        if stats.prefill_tokens == 0 and stats.draft_catch_up_tokens == 0:
            source = stats.draft_source or self._key[0]  # what drafted; else what was chosen
            self.draft_ms.setdefault(source, _RecentMedian()).add(stats.draft_ms / k)
        acc = self._acceptance(self._key)
        for i in range(min(k, n + 1)):  # positions verified on the kept path
            acc[i].add(1.0 if i < n else 0.0)


def make_controller(proposer: Proposer | None) -> Controller:
    if proposer is None:
        return FixedGamma(0)
    gamma = proposer.num_speculative_tokens
    if gamma == "auto":
        return AdaptiveGamma(proposer.max_speculative_tokens, proposer)
    return FixedGamma(int(gamma))
