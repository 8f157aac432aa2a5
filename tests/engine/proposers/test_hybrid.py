"""Hybrid drafting (n-gram lookup + an EAGLE-3 head, engine/proposers/hybrid.py): greedy
equals plain and names each draft's source, the head's context is kept whole while n-gram
drafts, and the controller chooses source and γ from measured acceptance and cost.

Its exactness, with a controller that alternates the two sources step by step so every
sample mixes them, is a row of test_exactness.py's one test over the methods."""

import pytest
import torch

from specchat.engine import SamplingParams, SpeculativeEngine
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.gamma.controller import AdaptiveGamma, Controller
from specchat.engine.proposers import Candidate, NgramProposer, Proposer
from specchat.engine.proposers.eagle import EagleProposer
from specchat.engine.proposers.hybrid import HybridProposer
from specchat.events import StepStats
from tests.engine.test_exactness import PROMPT, Alternate
from tests.support import table_lm
from tests.support.tiny_heads import random_eagle3_head

def hybrid(target, head_gamma=3):
    """``target``: a transformers model, or a FeatureTableLM (its own backend)."""
    backend = target if isinstance(target, table_lm.FeatureTableLM) else TransformersBackend(target)
    head = EagleProposer(random_eagle3_head(target, draft_vocab=12), backend, "auto", head_gamma)
    return backend, HybridProposer(NgramProposer("auto", 1, 3, max_speculative_tokens=4), head, 4)


def test_hybrid_greedy_equals_plain_and_names_each_drafts_source(target):
    params = SamplingParams(temperature=0.0)
    plain = SpeculativeEngine(TransformersBackend(target), None, eos_token_ids=[])
    want = [t.id for s in plain.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    backend, proposer = hybrid(target)
    engine = SpeculativeEngine(backend, proposer, controller=Alternate(2, proposer), eos_token_ids=[])
    steps = list(engine.generate(PROMPT, params, max_new_tokens=24))
    assert [t.id for s in steps for t in s.tokens] == want
    for step in steps:  # a token's source is its step's, and only drafted tokens have one
        for token in step.tokens:
            if token.kind in ("accepted", "resampled"):
                assert token.source == step.stats.draft_source != ""
            else:
                assert token.source == ""
    assert {s.stats.draft_source for s in steps if s.stats.num_draft_tokens} == {"ngram", "eagle3"}


def test_the_head_keeps_its_context_while_ngram_drafts(target):
    """After steps n-gram drafted, the head holds a pair for every position the target
    kept (the turn's prompt step aside): nothing it missed is lost."""
    backend, proposer = hybrid(target)
    engine = SpeculativeEngine(backend, proposer, controller=Alternate(2, proposer), eos_token_ids=[])
    ids = list(PROMPT)
    for step in engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=3), max_new_tokens=12):
        ids += [t.id for t in step.tokens]
    proposer.select("eagle3")
    proposer.propose(ids, 1, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    held = proposer.head._cache.positions
    assert held == list(range(held[0], len(ids) - 1)), held


class Offers(Proposer):
    """Offers fixed candidates (the controller's view of a hybrid) and records selections."""

    kind = "hybrid"

    def __init__(self, offers, every_other=None):
        super().__init__("auto", 4)
        self.offers, self.selected, self.calls = offers, [], 0
        self.every_other = every_other  # offered instead on odd calls (n-gram missing)

    def candidates(self, ids, limit):
        self.calls += 1
        offers = self.every_other if self.every_other is not None and self.calls % 2 else self.offers
        return [Candidate(source, min(limit, n)) for source, n in offers]

    def select(self, source):
        self.selected.append(source)


def run_steps(controller, offers, verdicts, draft_ms, step_ms=10.0, per_token_ms=2.0, steps=60):
    """Drives the controller: drafts of source s are kept per ``verdicts[s]`` (acceptance
    per position) and cost ``draft_ms[s]`` each; a step verifying k drafts costs
    step_ms + k·per_token_ms. Returns the (source, k) chosen at each step."""
    chosen = []
    for _ in range(steps):
        k, _ = controller.choose([1, 2, 3])
        source = offers.selected[-1] if k else ""
        n = 0
        while n < k and verdicts[source] > n / max(k, 1) and n < round(verdicts[source] * k):
            n += 1
        stats = StepStats(k, k, n, draft_ms=k * draft_ms.get(source, 0.0),
                          total_ms=step_ms + k * per_token_ms + k * draft_ms.get(source, 0.0), draft_source=source)
        controller.observe(stats, None)
        chosen.append((source, k))
    return chosen


def test_the_controller_routes_to_the_source_that_pays():
    offers = Offers([("ngram", 4), ("eagle3", 3)])
    controller = AdaptiveGamma(4, offers, probe_every=1000)
    # n-gram: free and kept; the head: dear and rejected → n-gram every step once learnt
    chosen = run_steps(controller, offers, {"ngram": 1.0, "eagle3": 0.0}, {"ngram": 0.0, "eagle3": 5.0})
    assert all(source == "ngram" and k > 0 for source, k in chosen[-20:]), chosen[-20:]
    # the same head alone, where n-gram has nothing to offer: plain steps
    offers = Offers([("eagle3", 3)])
    controller = AdaptiveGamma(4, offers, probe_every=1000)
    chosen = run_steps(controller, offers, {"eagle3": 0.0}, {"eagle3": 5.0})
    assert all(k == 0 for _, k in chosen[-20:]), chosen[-20:]
    # a cheap head that is kept: the head drafts
    offers = Offers([("eagle3", 3)])
    controller = AdaptiveGamma(4, offers, probe_every=1000)
    chosen = run_steps(controller, offers, {"eagle3": 1.0}, {"eagle3": 0.5})
    assert all(source == "eagle3" and k > 0 for source, k in chosen[-20:]), chosen[-20:]


def test_each_source_has_its_own_draft_cost():
    """The head's cost per draft must not be averaged with n-gram lookup's (near zero):
    the controller keeps them apart, so a dear head is not made to look cheap."""
    offers = Offers([("ngram", 4), ("eagle3", 3)], every_other=[("eagle3", 3)])
    controller = AdaptiveGamma(4, offers, probe_every=1000)
    chosen = run_steps(controller, offers, {"ngram": 1.0, "eagle3": 0.5}, {"ngram": 0.0, "eagle3": 5.0}, steps=30)
    assert {source for source, k in chosen if k} == {"ngram", "eagle3"}
    assert controller.model.draft_ms["eagle3"].value == pytest.approx(5.0)
    assert controller.model.draft_ms["ngram"].value == pytest.approx(0.0)


def test_the_heads_catch_up_stays_bounded_through_a_long_plain_stretch():
    """While n-gram lookup drafts (or nothing does), the target's features queue for the
    head; a long stretch keeps only the most recent MAX_QUEUED, so the head's next turn
    costs a bounded catch-up, not the whole stretch."""
    from specchat.engine.proposers.eagle import MAX_QUEUED
    from tests.support.vocab16 import tiny_lm

    target = tiny_lm(0, max_positions=512)
    backend, proposer = hybrid(target)

    class Plain(Controller):
        def choose(self, ids):
            return 0, None

    engine = SpeculativeEngine(backend, proposer, controller=Plain(), eos_token_ids=[])
    list(engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=1), max_new_tokens=MAX_QUEUED + 60))
    assert len(proposer.head._queued) == MAX_QUEUED
