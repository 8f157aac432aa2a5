"""EAGLE-3 head drafts keep the target's exact joint distribution.

The head (random weights, tests/support/tiny_heads.py) reads the tiny float64 target's own hidden
states through the transformers backend's feature seam, drafts chains of 2 or 3 with q
on a reduced draft vocabulary, and whole seeded 3-token generations are compared with
the joint enumerated from the target alone (chi-square, ALPHA = 1e-3 per test, as in
test_exactness.py). Sampling settings include top-k / top-p; the reduced vocabulary
leaves target tokens the head can never draft, so rejections resample into them.
``test_the_eagle_check_has_power`` plants a head whose reported q forgets the d2t
offset and shows the same check fails.

Each case runs on one of two targets (float64, vocabulary 16): the tiny transformers
Llama through the transformers backend (its real feature seam and KV cache), or, where a
case varies only the sampling setting, γ or the head's weights, the table model with
hidden states (tests/support/table_lm.py's FeatureTableLM: logits and the states the head
reads are rows chosen by the last two ids), whose forwards are lookups, so the sample
costs the head's drafting and the engine's bookkeeping alone. The Llama keeps the most
filtered case (and int8) and the power check; same samples and ALPHA on both.
"""

import pytest

from specchat.engine import SamplingParams
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.proposers import Proposal
from specchat.engine.proposers.eagle import EagleProposer
from tests.engine.test_exactness import ALPHA, LENGTH, PROMPT, chi_square_pvalue
from tests.support import power, table_lm
from tests.support.folded import FoldedEngine
from tests.support.tiny_heads import random_eagle3_head
from tests.support.vocab16 import exact_joint

SAMPLES = 2500


def eagle_engine(target, gamma=2, draft_vocab=12, proposer_class=EagleProposer, controller=None, int8=False):
    """``target``: a transformers model, or a FeatureTableLM (its own backend)."""
    backend = target if isinstance(target, table_lm.FeatureTableLM) else TransformersBackend(target)
    head = random_eagle3_head(target, draft_vocab=draft_vocab)
    proposer = proposer_class(head, backend, gamma, int8=int8)
    return FoldedEngine(backend, proposer, controller=controller or power.EveryStep(gamma), eos_token_ids=[])


@pytest.mark.parametrize("model, setting, gamma, int8", [
    ("table", "t1", 2, False), ("table", "t0.7-topk5", 3, False), ("table", "t0.9-topk6-topp0.9", 2, False),
    ("llama", "t0.9-topk6-topp0.9", 3, True)])
def test_eagle_joint_distribution_is_the_targets(target, model, setting, gamma, int8):
    """int8: the head drafts from int8 weights (as on a CPU by default); q is the
    quantised head's own law, so verification stays exact."""
    params = power.SETTINGS[setting]
    joint_of = exact_joint
    if model == "table":
        target, joint_of = table_lm.FeatureTableLM(table_lm.random_table(0)), table_lm.exact_joint
    engine = eagle_engine(target, gamma, int8=int8)
    assert engine.proposer.int8 == int8
    counts = power.sample_counts(engine, PROMPT, params, SAMPLES, LENGTH)
    metrics = engine.metrics
    assert metrics.num_draft_tokens > SAMPLES, "the head rarely drafted: the test would prove little"
    assert 0 < metrics.num_accepted_tokens < metrics.num_draft_tokens
    pvalue = chi_square_pvalue(counts, joint_of(target, PROMPT, LENGTH, params), SAMPLES)
    assert pvalue > ALPHA, f"{model}: eagle γ={gamma}/{setting}: chi-square p = {pvalue:.2e}"


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
    engine = eagle_engine(target, 2, proposer_class=UnmappedQ)
    joint = exact_joint(target, PROMPT, LENGTH, params)
    # looks at the samples as they come (power.planted_bug_caught: false-pass rate ALPHA as
    # before); the unmapped q is caught by the 1,000th sample (p 2e-22), not the 2,500th
    caught, where = power.planted_bug_caught(engine, PROMPT, params, SAMPLES, LENGTH,
                                             lambda counts, n: chi_square_pvalue(counts, joint, n), ALPHA)
    assert caught, where
