"""Trees of drafts keep the target's exact joint distribution (engine/tree.py).

An EAGLE-3 head (random weights, tests/tiny_heads.py) drafts a chain and, beside its
first draft, rivals drawn without replacement from the same law; the tiny float64
target verifies the tree in one pass (a 4D mask) by recursive rejection sampling over
siblings. Whole seeded 3-token generations are compared with the joint enumerated from
the target alone (chi-square, ALPHA = 1e-3, as in test_exactness.py), at T = 1 and with
top-k / top-p. The planted bugs — rivals reported with the law before the earlier
siblings were removed, and a residual that forgets a rejected sibling — each fail it."""

import pytest
import torch

from specchat.engine import SamplingParams, SpeculativeEngine
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.eagle import EagleProposer
from specchat.engine.proposers import NgramProposer, Proposal
from specchat.engine.tree import chain_parents, walk
import power
from test_exactness import ALPHA, LENGTH, PROMPT, chi_square_pvalue
from tiny_heads import random_eagle3_head
from vocab16 import exact_joint

SAMPLES = 2500


def tree_engine(target, siblings=3, gamma=2, proposer_class=EagleProposer, scale=1.5):
    backend = TransformersBackend(target)
    head = random_eagle3_head(target, draft_vocab=12, scale=scale)
    proposer = proposer_class(head, backend, gamma, siblings=siblings)
    return SpeculativeEngine(backend, proposer, controller=power.EveryStep(gamma), eos_token_ids=[])


def tree_counts(engine, params):
    counts, kept_rival = {}, 0
    for seed in range(SAMPLES):
        p = SamplingParams(params.temperature, params.top_p, params.top_k, seed=seed)
        seq = []
        for step in engine.generate(PROMPT, p, max_new_tokens=LENGTH):
            seq += [t.id for t in step.tokens]
        counts[tuple(seq)] = counts.get(tuple(seq), 0) + 1
    return counts


@pytest.mark.parametrize("setting", ["t1", "t0.9-topk6-topp0.9"])
def test_tree_joint_distribution_is_the_targets(target, setting):
    params = power.SETTINGS[setting]
    engine = tree_engine(target)
    counts = tree_counts(engine, params)
    m = engine.metrics
    assert m.num_draft_tokens > 3 * SAMPLES and 0 < m.num_accepted_tokens
    pvalue = chi_square_pvalue(counts, exact_joint(target, PROMPT, LENGTH, params), SAMPLES)
    assert pvalue > ALPHA, f"tree/{setting}: chi-square p = {pvalue:.2e}"


def test_tree_greedy_equals_plain(target):
    params = SamplingParams(temperature=0.0)
    plain = SpeculativeEngine(TransformersBackend(target), None, eos_token_ids=[])
    want = [t.id for s in plain.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    engine = tree_engine(target, siblings=3, gamma=3)
    steps = list(engine.generate(PROMPT, params, max_new_tokens=24))
    assert [t.id for s in steps for t in s.tokens] == want
    assert max(s.stats.num_draft_tokens for s in steps) == 5  # a chain of 3 and two rivals


class StaleRivalLaw(EagleProposer):
    """Planted bug: each rival reported with the first draft's law, as if drawn with
    replacement (the earlier siblings never removed)."""

    def propose(self, ids, k, params, generator):
        proposal = super().propose(ids, k, params, generator)
        if proposal.parents is None:
            return proposal
        q = proposal.q.clone()
        for i, parent in enumerate(proposal.parents):
            if parent == -1 and i > 0:
                q[i] = q[0]
        return Proposal(proposal.tokens, q, proposal.forwards, source=proposal.source, parents=proposal.parents)


def test_the_tree_check_has_power(target):
    params = SamplingParams(temperature=1.0)
    engine = tree_engine(target, siblings=4, proposer_class=StaleRivalLaw, scale=3.0)
    counts = tree_counts(engine, params)
    assert chi_square_pvalue(counts, exact_joint(target, PROMPT, LENGTH, params), SAMPLES) < ALPHA


def test_point_mass_siblings_are_one_categorical_draw():
    """Deterministic candidates (n-gram continuations) as siblings: the emitted token's
    law is p exactly, read off by enumeration over many draws."""
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    n = 20000
    for _ in range(n):
        verdict = walk(p.repeat(4, 1), [3, 1, 2], (-1, -1, -1), None, generator)
        first = [3, 1, 2][verdict.path[0]] if verdict.path else verdict.next_token
        counts[first] += 1
    assert torch.allclose(counts / n, p[0].float(), atol=0.015)


def test_a_chain_is_a_tree_with_one_child_each():
    assert chain_parents(3) == (-1, 0, 1)
