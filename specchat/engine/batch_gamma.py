"""γ = auto for a batch: every sequence's drafts chosen at once, by goodput.

In a batched step every sequence's rows run in one decode, so what a draft costs is what
one more row adds to that decode (the marginal cost at the batch's size), not what a
one-sequence step of k drafts costs. Drafts pay while the tokens they are expected to
add outrun the time they add. Of the m drafts the batch could verify, the step takes the
m that maximises

    goodput(m) = (N + S_m) / (w(R0 + m) + m·d)

N sequences each emit at least one token and R0 rows are their pending tokens; the
candidates are every sequence's possible drafts, draft j of a sequence kept with
probability s_j = a_1·…·a_j (its survival), and S_m is the sum of the m largest (taking
the largest first never takes a sequence's draft j+1 before its draft j); w(R) is the
measured time of a decode of R rows and what follows it (a line through the sizes
measured, elsewhere) and d the measured drafting time per draft. m = 0, plain decoding
for everyone, wins where no draft earns its row, and sooner the larger the batch: its
rows already use the spare arithmetic that drafts live on (the argument of vLLM's dynamic
speculation). At one sequence this is AdaptiveGamma's E(k)/T(k).

Acceptance a_i is estimated per acceptance key (the n-gram match's bucket and consensus,
with its prior) as AdaptiveGamma does, from every sequence's verdicts pooled: one model
of the text, more evidence. While nothing is drafted, a probe offers the single likeliest
draft every ``probe_every`` steps so the estimates can recover. Exactness does not depend
on the choice: it uses only the past and each sequence's own tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.controller import AcceptanceKey, match_key, match_prior
from specchat.engine.cost_model import CostModel, Ewma, RecentMedian, line
from specchat.engine.proposers import Candidate


@dataclass(frozen=True)
class BatchPlan:
    """Drafts per sequence for one step, and the model's word on it: ``tokens`` E_i per
    sequence, ``cost`` the step's time in units of a plain step of the same sequences,
    ``gain`` its predicted goodput over plain decoding, ``marginal_ms`` what one more row
    adds to a decode at this size (None where not yet measured)."""

    drafts: list[int]
    tokens: list[float | None]
    cost: float | None
    gain: float | None
    marginal_ms: float | None


class BatchGamma:
    def __init__(self, max_gamma: int, probe_every: int = 24, window: int = 9) -> None:
        self.max_gamma = max_gamma
        self.acceptance = CostModel(max_gamma)  # its acceptance per key; step times are kept here
        self.step_ms: dict[int, RecentMedian] = {}  # rows → time of a decode of that many and its reading
        self.draft_ms = RecentMedian(window)  # per draft
        self.window = window
        self.probe_every = probe_every
        self.plain_run = 0
        self.expected = Ewma(decay=0.02)  # predicted gain of the steps as chosen (~50 steps)
        self._keys: list[AcceptanceKey | None] = []

    def _key(self, candidate: Candidate) -> AcceptanceKey:
        return candidate.source, (match_key(candidate.match) if candidate.match is not None else ())

    def _prior(self, key: AcceptanceKey) -> float | None:
        return match_prior(key[1]) if key[1] else None

    def plan(self, offers: list[Candidate | None], pending_rows: int) -> BatchPlan:
        """``offers``: per sequence, what its proposer can draft (limit already capped by
        the room it has) or None; ``pending_rows``: the rows the step runs anyway."""
        n = len(offers)
        self._keys = [None if c is None or c.limit <= 0 else self._key(c) for c in offers]
        survivals: list[tuple[float, int]] = []  # (s_j, sequence), each sequence's in order
        for i, (candidate, key) in enumerate(zip(offers, self._keys)):
            if key is not None:
                limit = min(candidate.limit, self.max_gamma)
                survivals += [(s, i) for s in self.acceptance.survival(key, limit, self._prior(key))]
        survivals.sort(key=lambda pair: -pair[0])  # stable: a sequence's s_j never rise with j
        sums = [0.0]
        for s, _ in survivals:
            sums.append(sums[-1] + s)
        fit, d = line(self.step_ms), self.draft_ms.value

        def time_of(rows: int) -> float | None:  # cost_model.fitted, with the line fitted once a step
            if rows in self.step_ms:
                return self.step_ms[rows].value
            return None if fit is None else max(1e-3, fit[1] + fit[2] * (rows - fit[0]))

        w0 = time_of(pending_rows)

        def predicted(m: int) -> tuple[float, float] | None:
            """(goodput over plain, time in plain-step units) of taking the m likeliest."""
            w = time_of(pending_rows + m)
            if w is None or w0 is None or (m and d is None):
                return None
            t = w + m * (d or 0.0)
            return (n + sums[m]) / t * w0 / n, t / w0

        if survivals and predicted(1) is None:
            # explore: a size and a draft's cost not yet measured (the very first step runs plain)
            take = min(len(survivals), n) if self.step_ms else 0
        else:
            gains = [predicted(m) for m in range(len(survivals) + 1)]
            take = max(range(len(gains)), key=lambda m: gains[m][0] if gains[m] else 0.0)
            if take:
                self.plain_run = 0
            elif survivals:
                self.plain_run += 1
                if self.plain_run >= self.probe_every:  # conditions change: look again
                    self.plain_run, take = 0, 1
        gain, cost = predicted(take) or (None, None)
        drafts, tokens = [0] * n, [1.0] * n
        for s, i in survivals[:take]:
            drafts[i] += 1
            tokens[i] += s
        if gain is not None:
            self.expected.add(gain)
        return BatchPlan(drafts, tokens if gain is not None else [None] * n, cost, gain,
                         fit[2] if fit is not None else None)

    def observe(self, rows: int, step_ms: float, draft_ms: float, prefill: bool, verdicts: list[tuple[int, int]]) -> None:
        """The step just planned: its rows and time (decode and reading, drafting apart),
        and per sequence (drafts verified, drafts kept). A step that also ran a prompt says
        nothing of what verifying costs."""
        drafted = sum(k for k, _ in verdicts)
        if not prefill:
            self.step_ms.setdefault(rows, RecentMedian(self.window)).add(step_ms)
            if drafted:
                self.draft_ms.add(draft_ms / drafted)
        for key, (k, kept) in zip(self._keys, verdicts):
            if key is not None and k:
                self.acceptance.verdicts(key, key[0], k, kept, self._prior(key))

    def recommendation(self) -> tuple[int | str | None, float | None]:
        """"auto" where drafting is predicted to beat plain decoding in the steps lately
        planned, else 0; None before the model could predict."""
        gain = self.expected.value
        return (None, None) if gain is None else ("auto" if gain > 1.0 else 0, gain)
