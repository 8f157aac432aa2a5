"""Suffix decoding's scores feed the cost gate (controller.py, key_prior): a unanimous
quote is drafted deep from its first step, one whose earlier occurrences split at the
second draft is drafted short of the split, before any verdict; verdicts then move the
estimates. Prompt lookup's keys and priors are unchanged (test_batch_gamma.py replays
recorded steps and asserts the same choices)."""

from __future__ import annotations

from dataclasses import replace

from specchat.engine.gamma.batch_plan import BatchGamma
from specchat.engine.gamma.acceptance import acceptance_key, key_prior, match_prior, split_shape
from specchat.engine.gamma.controller import AdaptiveGamma
from specchat.engine.proposers import Candidate, NgramProposer, Proposer
from specchat.engine.proposers.suffix import SuffixProposer
from specchat.events import StepStats
from tests.engine.gamma.test_controller import drive

GRAM = [100, 101, 102, 103, 104, 105]
TAIL = [30, 31, 32, 33, 34, 35, 36, 37]


def unanimous() -> list[int]:
    """Three earlier copies of a 16-token passage; the context ends with its first six."""
    quote = GRAM + list(range(106, 116))
    return quote + [1] + quote + [2] + quote + [3] + GRAM


def split() -> list[int]:
    """Five earlier occurrences of GRAM, all followed by 7, then by 20, 20, 21, 21, 22:
    the second draft's share is 2/5 (score 0.4); the two that agree on it go on alike."""
    ids: list[int] = []
    for sep, fork in zip((1, 2, 3, 4, 5), (20, 20, 21, 21, 22)):
        ids += GRAM + [7, fork] + TAIL + [sep]
    return ids + GRAM


def suffix_candidate(ids: list[int], limit: int = 10) -> Candidate:
    (candidate,) = SuffixProposer("auto", 1, 3, limit).candidates(ids, limit)
    return candidate


class Offers(Proposer):
    """Offers one candidate every step, whatever the context."""

    kind = "suffix"

    def __init__(self, candidate: Candidate) -> None:
        super().__init__("auto", 10)
        self.candidate = candidate

    def candidates(self, ids, k):
        return [replace(self.candidate, limit=min(k, self.candidate.limit))]


def dear_verification(max_gamma: int = 10) -> AdaptiveGamma:
    """An adaptive controller with its step times measured, verifying dear (each draft adds
    ~0.27 of a plain step: a CPU) and drafting cheap; no acceptance verdict yet."""
    controller = AdaptiveGamma(max_gamma)
    for k in (0, 1, 2, 3, 5, 10):
        for _ in range(3):
            controller.observe(StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=0,
                                         draft_ms=0.05 * k, total_ms=11.0 + 3.0 * k + 0.05 * k,
                                         draft_source="suffix" if k else ""), None)
    controller.model.accept.clear()  # the priming verdicts (nothing kept) are no evidence
    return controller


def first_choice(candidate: Candidate) -> int:
    controller = dear_verification()
    controller.proposer = Offers(candidate)
    return controller.choose([1, 2, 3])[0]


def test_the_candidate_carries_each_drafts_share():
    whole, forked = suffix_candidate(unanimous()), suffix_candidate(split())
    assert whole.shares == (1.0,) * 10 and whole.match.consensus == "agreed"
    assert forked.shares[:3] == (1.0, 0.4, 1.0) and forked.match.consensus == "agreed"
    assert split_shape(whole.shares) == () and split_shape(forked.shares) == (0.25,)


def test_a_unanimous_quote_is_drafted_deep_and_a_split_one_short_of_the_split():
    """Same match (agreement 6, every occurrence agreeing on the first draft), so prompt
    lookup's prior is the same for both; only the scores tell the split from the quote."""
    whole, forked = suffix_candidate(unanimous()), suffix_candidate(split())
    assert key_prior(acceptance_key(whole))[0] == key_prior(acceptance_key(forked))[0]  # the match says the same
    deep, short = first_choice(whole), first_choice(forked)
    assert deep >= 5, f"a unanimous quote drafted {deep} deep"
    assert short == 1, f"drafted {short} past a 2-of-5 split at the second draft"


def test_the_split_keys_estimate_starts_from_the_share_and_learns_from_verdicts():
    forked = suffix_candidate(split())
    controller = dear_verification()
    controller.proposer = Offers(forked)
    controller.choose([1, 2, 3])
    key = acceptance_key(forked)
    start = [e.value for e in controller.model.accept[key][:3]]
    prior = match_prior(key[1][:2])
    assert start[0] == prior and start[1] < 0.5 * prior and start[2] == prior
    for _ in range(5):  # the target keeps both drafts: the second draft's estimate climbs
        controller.observe(StepStats(num_speculative_tokens=2, num_draft_tokens=2, num_accepted_tokens=2,
                                     draft_ms=0.1, total_ms=17.0, draft_source="suffix"), None)
    assert controller.model.accept[key][1].value > start[1] + 0.3


def test_a_unanimous_quote_whose_drafts_all_fail_stops_being_drafted():
    controller = dear_verification()
    controller.proposer = Offers(suffix_candidate(unanimous()))
    chosen = drive(controller, 60, accept_rate=0.0, draft_ms_per_token=0.05, verify_ms=lambda k: 11.0 + 3.0 * k)
    assert chosen[0] >= 5, chosen
    assert sum(k > 0 for k in chosen[20:]) <= 2, f"kept drafting a quote whose drafts all failed: {chosen}"


def test_the_batch_plan_starts_from_the_same_per_draft_estimates():
    forked = suffix_candidate(split())
    planner = BatchGamma(10)
    planner.plan([forked, None], 2)
    survival = planner.model.survival(acceptance_key(forked), 3)
    prior = match_prior(acceptance_key(forked)[1][:2])
    assert survival[0] == prior and survival[1] < 0.5 * prior ** 2


def test_prompt_lookups_key_is_unchanged():
    ids = unanimous()
    (candidate,) = NgramProposer("auto", 1, 3, 10).candidates(ids, 10)
    assert candidate.shares == () and acceptance_key(candidate) == ("ngram", (5, "agreed"))
    assert key_prior(acceptance_key(candidate)) == match_prior((5, "agreed"))
