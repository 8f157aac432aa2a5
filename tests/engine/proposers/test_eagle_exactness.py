"""EAGLE-3 heads: greedy drafting equals plain decoding (float and int8 weights), and the
exactness check has power against a head whose reported q forgets the d2t offset.

The joint-distribution cases of every method, EAGLE-3 heads and their trees among them,
are one test in test_exactness.py; the planted bug here runs through the same batched
samples (tests/support/batched.py) and chi-square (ALPHA = 1e-3).
"""

from specchat.engine import SamplingParams
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.proposers import Proposal
from specchat.engine.proposers.eagle import EagleProposer
from tests.engine.test_exactness import ALPHA, LENGTH, PROMPT, pvalue_of
from tests.support import power, table_lm
from tests.support.folded import FoldedEngine
from tests.support.tiny_heads import random_eagle3_head
from tests.support.batched import Case
from tests.support.vocab16 import laws_of

SAMPLES = 2500


def eagle_engine(target, gamma=2, draft_vocab=12, proposer_class=EagleProposer, controller=None, int8=False):
    """``target``: a transformers model, or a FeatureTableLM (its own backend)."""
    backend = target if isinstance(target, table_lm.FeatureTableLM) else TransformersBackend(target)
    head = random_eagle3_head(target, draft_vocab=draft_vocab)
    proposer = proposer_class(head, backend, gamma, int8=int8)
    return FoldedEngine(backend, proposer, controller=controller or power.EveryStep(gamma), eos_token_ids=[])


def test_eagle_greedy_equals_plain(target):
    params = SamplingParams(temperature=0.0)
    plain = FoldedEngine(TransformersBackend(target), None, eos_token_ids=[])
    want = [t.id for s in plain.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    for int8 in (False, True):
        engine = eagle_engine(target, 3, int8=int8)
        got = [t.id for s in engine.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
        assert got == want, int8
    assert engine.metrics.num_draft_tokens > 0


class UnmappedQ(EagleProposer):
    """Planted bug: q reported at the draft-vocabulary index instead of the target id
    (the d2t offset forgotten when q is put on the target's vocabulary)."""

    def propose(self, ids, k, params, generator):
        proposal = super().propose(ids, k, params, generator)
        if proposal.q is None:
            return proposal
        offset = int(self.head.d2t[0])
        return Proposal(proposal.tokens, proposal.q.roll(-offset, dims=-1), proposal.forwards)


def test_the_eagle_check_has_power(target):
    params = SamplingParams(temperature=1.0)
    head = random_eagle3_head(target, draft_vocab=12)
    case = Case(laws_of(target), lambda lane: UnmappedQ(head, lane, 2, int8=False), lambda p: power.EveryStep(2), target)
    # looks at the samples as they come (power.planted_bug_caught: false-pass rate ALPHA as
    # before); the unmapped q is caught by the 1,000th sample (p 2e-22), not the 2,500th
    caught, where = power.planted_bug_caught(case, PROMPT, params, SAMPLES, LENGTH,
                                             pvalue_of(laws_of(target), params, LENGTH), ALPHA)
    assert caught, where
