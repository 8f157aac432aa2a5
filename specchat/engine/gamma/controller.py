"""Choosing γ, the number of drafts, before each step, from the past only (so exactness
does not depend on it): :class:`FixedGamma` asks for γ with occasional plain calibration
steps; :class:`AdaptiveGamma` picks the k maximising E(k) / T(k) (docs/design/gamma.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.gamma.acceptance import AcceptanceKey, acceptance_key, key_prior
from specchat.engine.gamma.cost_model import CostModel
from specchat.engine.proposers import Candidate, Proposer
from specchat.events import StepStats
from specchat.methods import METHODS


@dataclass(frozen=True)
class Assessment:
    """What the cost model says of a step as drafted, before it is verified, under StepStats'
    names: E(k) and T(k)/w(0), the γ to use (an int, "auto", 0 for none) and its predicted
    speed-up, c and v(k). None where not yet measured."""

    predicted_tokens: float | None = None
    predicted_cost: float | None = None
    recommended_gamma: int | str | None = None
    recommended_gain: float | None = None
    cost_ratio: float | None = None  # c and v(k) as the model has them (a drafting step's only)
    verify_cost: tuple[float, ...] = ()


class Controller:
    """Chooses γ before each step, keeping the one cost model up to date and answering from it
    what a step should yield and which γ to recommend, whoever chooses."""

    max_gamma = 8
    _key: AcceptanceKey = ("", ())  # the acceptance estimates the chosen drafts share
    _behind = 0  # the catch-up tokens the chosen source runs first (its price is in the forecast)

    @property
    def model(self) -> CostModel:
        """The cost model, made on first use (a subclass need not call an __init__)."""
        if "_model" not in self.__dict__:
            self._model = CostModel(self.max_gamma)
        return self._model

    def start_turn(self) -> None:
        """A new ``generate`` call begins."""

    def inherit(self, other: Controller) -> None:
        """Replacing ``other`` (a γ changed mid-chat): its times stay true of this machine."""
        self.model.adopt(other.model)

    def choose(self, ids: list[int]) -> tuple[int, float | None]:
        """(γ for the next step, predicted gain over a plain step or None)."""
        raise NotImplementedError

    def observe(self, stats: StepStats, proposal: object) -> None:
        """The finished step's measurements."""
        source = stats.draft_source or self._key[0]  # what drafted; else what was chosen
        self.model.observe(stats, self._key, source, key_prior(self._key))

    def assess(self, k: int, source: str) -> Assessment:
        """The model's word on a step that drafted ``k`` tokens from ``source`` under the
        chosen context, asked before the step is observed (its own outcome is not in it)."""
        source = source or self._key[0]
        forecast = self.model.step_prediction(self._key, k, source, key_prior(self._key), self._behind)
        tokens, cost = forecast if forecast is not None else (None, None)
        gamma, gain = self.recommendation()
        c, v = self.model.ratios(source) if k else (None, ())  # a plain step leaves them as they were
        return Assessment(tokens, cost, gamma, gain, c, v)

    def recommendation(self) -> tuple[int | str | None, float | None]:
        """(γ, its predicted speed-up): the best fixed γ, 0 if none beats plain decoding."""
        return self.model.recommend() or (None, None)

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
        self.max_gamma = max(self.max_gamma, gamma)
        self.gamma = gamma
        self.calibrate_every = calibrate_every
        self.steps = 0

    def start_turn(self) -> None:
        self.steps = 0

    def choose(self, ids: list[int]) -> tuple[int, float | None]:
        self.model.at(len(ids))
        self.steps += 1
        # step 1 also runs the prompt, so it cannot time a plain step: calibrate on step 2
        return (0 if self.steps % self.calibrate_every == 2 else self.gamma), None

    def observe(self, stats: StepStats, proposal: object) -> None:
        if stats.draft_source:  # the source a miss is a miss of
            self._key = (stats.draft_source, ())
        super().observe(stats, proposal)

    def prefills_proposer(self) -> bool:
        return self.gamma > 0


RETEST_GROWTH, RETEST_SPAN = 4, 2048  # a source that cannot pay at context C: looked at again past both
# a drafting model is set aside where even every draft kept could not beat plain decoding by
# this much (the ceiling leaves out its catch-ups; measured why: docs/design/gamma.md)
CEILING_TO_DRAFT = 1.1
CONTEXT_DECAY = 0.97  # per step: the situations γ = auto has met lately weigh most (~33 steps)
class AdaptiveGamma(Controller):
    """Picks k ∈ 0..max_gamma maximising E(k)/T(k), the cost model's rate."""

    def __init__(self, max_gamma: int, proposer: Proposer | None = None, probe_every: int = 24,
                 calibrate_every: int = 64, turn_weight: float = 4.0) -> None:
        self.max_gamma = max_gamma
        self.proposer = proposer
        self.probe_every = probe_every
        # situation (per candidate its (acceptance key, limit, source); () a miss) → weight, recent most
        self.contexts: dict[tuple, float] = {}
        self._scale = 1.0
        self.plain_run = 0
        self.probe_after = probe_every  # plain steps before the next probe (backs off)
        self.max_probe_after = 8 * probe_every  # the back-off's cap: a probe at least this often
        self._probing = False
        self.speculative_run = 0
        self.calibrate_every = calibrate_every
        self.since_plain = 0
        self.turn_weight = turn_weight
        self.hopeless: dict[str, int] = {}  # source → the context at which even α = 1 could not pay

    def start_turn(self) -> None:
        # a new reply may quote far more or far less than the last one: acceptance learnt
        # there is kept as the starting point, but a few of this reply's drafts outweigh it
        self.model.loosen(self.turn_weight)

    def predicted_rates(self, key: AcceptanceKey, limit: int, source: str = "", behind: int = 0) -> list[float | None]:
        """Expected tokens per ms for k = 0..limit when ``source`` drafts, ``behind`` tokens
        behind (None where T(k) or its draft cost is unknown)."""
        return self.model.predicted_rates(key, limit, source, key_prior(key), behind)

    def choose(self, ids: list[int]) -> tuple[int, float | None]:
        # n-gram: a miss means nothing to verify, and the match informs a_i; a hybrid
        # offers the head beside it, with its own acceptance and cost (hybrid.py)
        self.model.at(len(ids))
        candidates = self.proposer.candidates(ids, self.max_gamma) if self.proposer else [Candidate("", self.max_gamma)]
        self._remember(tuple((acceptance_key(c), c.limit, c.source) for c in candidates))
        candidates = [c for c in candidates if not self.cannot_pay(c.source)]
        if not candidates:
            return 0, None
        self.since_plain += 1
        if 0 not in self.model.step_ms or self.since_plain >= self.calibrate_every or self.model.plain_is_stale():
            return 0, None  # (re)measure a plain step, near this context: the baseline of every gain
        best: tuple[float, int, Candidate] | None = None
        unexplored: Candidate | None = None
        for candidate in candidates:
            rates = self.predicted_rates(acceptance_key(candidate), candidate.limit, candidate.source, candidate.behind)
            known = [(r, k) for k, r in enumerate(rates) if r is not None]
            if len(known) < 2:
                unexplored = unexplored or candidate
                continue
            rate, k = max(known)
            if best is None or rate > best[0]:
                best = (rate, k, candidate)
        w0 = self.model.w(0)
        plain = 1.0 / w0 if w0 else None
        if unexplored is not None and (best is None or best[1] == 0):
            # explore: measure one speculative step size (of a source not yet timed)
            self._use(unexplored)
            return min(unexplored.limit, 2 + len(self.model.step_ms) - 1), None
        best_rate, best_k, chosen = best
        self._use(chosen)
        if best_k == 0:
            self.plain_run += 1
            if self.plain_run >= self.probe_after:  # conditions change: look again
                self.plain_run = 0
                probe = self._probe_source(candidates)
                ceiling = self.model.ceiling(probe.source, probe.limit, probe.behind) if probe.behind else None
                if ceiling is not None and ceiling < CEILING_TO_DRAFT:  # its catch-up outweighs the gain
                    self.probe_after = min(self.probe_after * 2, self.max_probe_after)
                    return 0, 1.0
                self._probing = True  # observe() sets the wait for the next probe
                self._use(probe)
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
                rates = self.predicted_rates(acceptance_key(chosen), chosen.limit, chosen.source, chosen.behind)
                return neighbour, rates[neighbour] / plain if rates[neighbour] and plain else None
        return best_k, best_rate / plain if plain else None

    def _use(self, candidate: Candidate) -> None:
        self._key, self._behind = acceptance_key(candidate), candidate.behind
        if self.proposer is not None:
            self.proposer.select(candidate.source)

    def _probe_source(self, candidates: list[Candidate]) -> Candidate:
        """The source a probe tries: the one whose single draft is predicted best."""
        def one_draft(candidate: Candidate) -> float:
            rates = self.predicted_rates(acceptance_key(candidate), 1, candidate.source, candidate.behind)
            return rates[1] if len(rates) > 1 and rates[1] is not None else 0.0
        return max(candidates, key=one_draft)

    def prefills_proposer(self) -> bool:
        # while speculation does not pay, a draft model's pass over each new prompt is
        # wasted time to first token; the next probe lets it catch up instead
        return self.plain_run == 0 and not (self.proposer is not None and self.cannot_pay(self.proposer.kind))

    def cannot_pay(self, source: str) -> bool:
        """Whether ``source`` was found unable to pay at a context this one has not yet
        outgrown (RETEST_GROWTH-fold and by RETEST_SPAN tokens)."""
        at = self.hopeless.get(source)
        return at is not None and self.model.context < max(RETEST_GROWTH * at, at + RETEST_SPAN)

    def observe(self, stats: StepStats, proposal: object) -> None:
        k, n = stats.num_draft_tokens, stats.num_accepted_tokens
        super().observe(stats, proposal)
        source = stats.draft_source
        # a model that drafts (a lookup's probe costs one verification and nothing else); a busy
        # machine slows its drafts and the target's steps alike, so the ceiling still judges
        if k and source in METHODS and not METHODS[source].point_mass:
            self.judge(source)
        elif not k and self.proposer is not None and self.proposer.drafting_model:
            # warm plain steps re-judge a model the load-time timing (read cold: docs/design/gamma.md)
            # kept; one set aside waits for RETEST and a probe's fresh timings instead
            if self.proposer.drafting_model not in self.hopeless:
                self.judge(self.proposer.drafting_model)
        if self._probing:
            self._probing = False
            if k and n:  # its draft was kept: look again at once, the estimate is catching up
                self.probe_after = 1
            else:  # it did not pay: wait twice as long next time, up to the cap
                self.probe_after = min(max(self.probe_after, self.probe_every // 2) * 2, self.max_probe_after)
        if k == 0:
            self.since_plain = 0

    def inherit(self, other: Controller) -> None:
        super().inherit(other)
        self.hopeless = dict(other.hopeless) if isinstance(other, AdaptiveGamma) else {}

    def judge(self, source: str) -> None:
        """Sets ``source`` aside at this context if its ceiling is below CEILING_TO_DRAFT
        (looks again once it is known and not); nothing while the ceiling is unknown."""
        ceiling = self.model.ceiling(source, self.max_gamma)
        if ceiling is not None and ceiling < CEILING_TO_DRAFT:
            self.hopeless[source] = self.model.context
        elif ceiling is not None:
            self.hopeless.pop(source, None)

    def _remember(self, context: tuple) -> None:
        # weights are kept against a growing scale (a step multiplies it by 1/decay), so
        # remembering is one entry's update, not a pass over every context
        self._scale /= CONTEXT_DECAY
        self.contexts[context] = self.contexts.get(context, 0.0) + self._scale
        if self._scale > 1e6:  # rescale now and then; contexts not met for ~450 steps go
            self.contexts = {c: w / self._scale for c, w in self.contexts.items() if w / self._scale >= 1e-6}
            self._scale = 1.0

    def expected_gain(self) -> float | None:
        """The model's speed-up for γ = auto over the situations it has been choosing in:
        in each, the best k of the best candidate (plain if none beats it), weighted by how
        often the situation came up lately. Σ w·E / Σ w·T(k)/w(0); None before w(0) and a
        draft's cost are measured (while it only explores, auto has no record to judge)."""
        w0 = self.model.w(0)
        if not w0 or not self.contexts:
            return None
        # a situation not met for ~100 steps (weight under 1/20 of a fresh one's) is gone:
        # auto's record is of the text it is writing now
        recent = {c: w for c, w in self.contexts.items() if w >= 0.05 * self._scale}
        deepest: dict[tuple, int] = {}  # (key, source) → the largest limit any context gives it
        for context in recent:
            for key, limit, source in context:
                deepest[(key, source)] = max(deepest.get((key, source), 0), limit)
        # one forecast per (key, source), read by every context at its own limit: the best
        # (gain, E, T/w0) among k = 1..L for each L
        best_upto: dict[tuple, list[tuple[float, float, float]]] = {}
        known = False
        for (key, source), limit in deepest.items():
            running, table = (1.0, 1.0, 1.0), []
            for f in self.model.forecast(self.model.survival(key, limit, key_prior(key)), source)[1:]:
                if f is not None:
                    known = True
                    if f[0] / f[1] * w0 > running[0]:
                        running = (f[0] / f[1] * w0, f[0], f[1] / w0)
                table.append(running)
            best_upto[(key, source)] = table
        if not known:
            return None
        tokens = cost = 0.0
        for context, weight in recent.items():
            best = (1.0, 1.0, 1.0)  # a plain step
            for key, limit, source in context:
                table = best_upto[(key, source)]
                if limit and table and table[min(limit, len(table)) - 1][0] > best[0]:
                    best = table[min(limit, len(table)) - 1]
            tokens += weight * best[1]
            cost += weight * best[2]
        return tokens / cost

    def recommendation(self) -> tuple[int | str | None, float | None]:
        """"auto" where the model expects it to beat plain decoding, else 0 (auto is the
        model's best policy by construction: a fixed γ beside it would only disagree)."""
        gain = self.expected_gain()
        return (None, None) if gain is None else (("auto" if gain > 1.0 else 0), gain)


def make_controller(proposer: Proposer | None) -> Controller:
    if proposer is None:
        return FixedGamma(0)
    gamma = proposer.num_speculative_tokens
    if gamma == "auto":
        return AdaptiveGamma(proposer.max_speculative_tokens, proposer)
    return FixedGamma(int(gamma))
