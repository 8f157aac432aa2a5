"""Medusa-1 drafts keep the target's exact joint distribution.

Random Medusa heads (tests/support/tiny_heads.py) read the tiny float64 target's final hidden
state through the transformers backend's seam and draft chains of 2 or 3, draft j from
head j − 1, with q on the heads' rows (all of them, or the 12 highest ids: rejections
then resample into tokens the heads can never draft). Medusa cannot draft before the
target has run the prompt, so each sample's first step is plain; 5-token samples then
hold one or two drafting steps of full chains, with rollbacks between them. They are
tested against the target's exactly enumerated law by the chi-square that pools rare
cells per prefix only (power.tree_chi_square, as test_exactness_steps.py does), at
ALPHA = 1e-3 per test, at T = 1 and at T = 0.9 with top-k and top-p.

``test_the_medusa_check_has_power`` plants a proposer whose reported q is off by one
head (draft j reported with head j's law instead of head j − 1's) and shows the same
check fails, as does one that reports the heads' plain softmax instead of the warped law
the drafts were sampled from (at T = 0.9 with top-k and top-p).

Each joint case runs on one of two targets (float64, vocabulary 16): the tiny transformers
Llama (its real final hidden states and KV cache; heads started from its lm_head, so
drafts are often kept), or the table model with hidden states (tests/support/table_lm.py's
FeatureTableLM: logits and final states are rows chosen by the last two ids; random
heads), whose forwards are lookups. A chain and a tree run on each; the planted bugs on
the Llama. Same samples and ALPHA on both.
"""

import pytest
import torch

from specchat.engine import SamplingParams
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.proposers import Proposal
from specchat.engine.proposers.medusa import MedusaProposer
from tests.engine.test_exactness import ALPHA, PROMPT
from tests.support import power, table_lm
from tests.support.folded import FoldedEngine
from tests.support.tiny_heads import random_medusa_head

SAMPLES = 1500
LENGTH = 5  # a plain first step, then drafting steps of full chains


def pvalue(target, engine, params, samples=SAMPLES) -> float:
    counts = power.sample_counts(engine, PROMPT, params, samples, LENGTH)
    if isinstance(target, table_lm.FeatureTableLM):
        return power.tree_chi_square(counts, table_lm.next_laws(target, PROMPT, params))
    return power.tree_chi_square(counts, power.model_next_laws(target, PROMPT, params))


def planted_bug_caught(target, engine, params, samples) -> tuple[bool, str]:
    """(caught, where): ``pvalue``'s samples and χ², looked at as they come
    (power.planted_bug_caught: a plant that changed nothing is "caught" with probability
    at most ALPHA, as by one test at ``samples``; a blatant one stops at 2/5 of them)."""
    laws = power.model_next_laws(target, PROMPT, params)
    return power.planted_bug_caught(engine, PROMPT, params, samples, LENGTH,
                                    lambda counts, n: power.tree_chi_square(counts, laws), ALPHA)


def medusa_engine(target, gamma=2, draft_vocab=None, proposer_class=MedusaProposer, controller=None, **tree):
    """``target``: a transformers model, or a FeatureTableLM (its own backend; random heads,
    as it has no lm_head to start them from)."""
    if isinstance(target, table_lm.FeatureTableLM):
        backend, like_target = target, 0.0
    else:
        backend, like_target = TransformersBackend(target), 1.0
    # each head the target's lm_head plus noise as large as its weights: drafts are often kept
    # (samples run fast), and the heads' laws differ enough that a q from the wrong head shows
    # (with a tenth of that noise the heads agreed so well that the off-by-one bug passed)
    head = random_medusa_head(target, num_heads=3, draft_vocab=draft_vocab, like_target=like_target)
    proposer = proposer_class(head, backend, gamma, **tree)
    return FoldedEngine(backend, proposer, controller=controller or power.EveryStep(gamma), eos_token_ids=[])


def test_the_final_hidden_state_is_what_the_lm_head_reads(target):
    """transformers' hidden_states[-1] is the final norm's output: lm_head(it) is the
    logits, row for row (a transformers upgrade that changed this would fail here)."""
    backend = TransformersBackend(target)
    assert backend.provides_final_hidden
    backend.request_final_hidden()
    logits = backend.forward(PROMPT, num_logits=3)
    rows = backend.last_final_hidden
    assert rows.shape == (3, target.config.hidden_size) and backend.final_hidden_start == len(PROMPT) - 3
    torch.testing.assert_close(target.lm_head(rows.to(target.dtype)), logits)
    drafts = torch.tensor([4, 5])
    logits = backend.forward(PROMPT + [7], extra=drafts, num_logits=3)  # a verify call: last id + 2 drafts
    assert backend.final_hidden_start == len(PROMPT)
    torch.testing.assert_close(target.lm_head(backend.last_final_hidden.to(target.dtype)), logits)


def test_draft_j_comes_from_head_j_minus_1(target):
    """The drafts of a step and their q: head j − 1's warped law on the final hidden state
    at the last position the target ran, put on the target's vocabulary via token_map."""
    backend = TransformersBackend(target)
    head = random_medusa_head(target, num_heads=3, draft_vocab=12)
    proposer = MedusaProposer(head, backend, 3)
    proposer.vocab_size = 16
    params = SamplingParams(temperature=0.9, top_k=6)
    assert len(proposer.propose(PROMPT, 3, params, None).tokens) == 0  # nothing ran yet
    backend.forward(PROMPT, num_logits=1)
    proposer.observe(0)
    ids = PROMPT + [9]
    proposal = proposer.propose(ids, 3, params, torch.Generator().manual_seed(0))
    hidden = target(input_ids=torch.tensor([PROMPT]), output_hidden_states=True).hidden_states[-1][0, -1]
    for j in range(3):
        law = torch.zeros(16, dtype=torch.float64)
        law[4:] = torch.softmax(head.head_logits(hidden, j) / 0.9, -1)
        law[law < law.topk(6).values[-1]] = 0
        torch.testing.assert_close(proposal.q[j], law / law.sum())
        assert proposal.q[j, int(proposal.tokens[j])] > 0
    assert proposal.source == "medusa" and proposal.forwards == 3
    assert len(proposer.propose(ids + [3], 3, params, None).tokens) == 0  # h is for another position


def model_target(model, target):
    return table_lm.FeatureTableLM(table_lm.random_table(0)) if model == "table" else target


@pytest.mark.parametrize("model, setting, gamma, draft_vocab", [("table", "t1", 2, None),
                                                                ("llama", "t0.9-topk6-topp0.9", 3, 12)])
def test_medusa_joint_distribution_is_the_targets(target, model, setting, gamma, draft_vocab):
    params = power.SETTINGS[setting]
    target = model_target(model, target)
    engine = medusa_engine(target, gamma, draft_vocab)
    p = pvalue(target, engine, params)
    metrics = engine.metrics
    assert metrics.num_draft_tokens > 2 * SAMPLES, "the heads rarely drafted: the test would prove little"
    assert 0 < metrics.num_accepted_tokens < metrics.num_draft_tokens
    assert p > ALPHA, f"{model}: medusa γ={gamma}/{setting}: chi-square p = {p:.2e}"


def test_medusa_greedy_equals_plain(target):
    params = SamplingParams(temperature=0.0)
    plain = FoldedEngine(TransformersBackend(target), None, eos_token_ids=[])
    want = [t.id for s in plain.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    engine = medusa_engine(target, 3, draft_vocab=12)
    got = [t.id for s in engine.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    assert got == want
    assert engine.metrics.num_draft_tokens > 0


class QOffByOneHead(MedusaProposer):
    """Planted bug: draft j is reported with head j's law (the next head's), not head
    j − 1's it was drawn from; the last draft keeps its own."""

    def propose(self, ids, k, params, generator):
        proposal = super().propose(ids, k, params, generator)
        if proposal.q is None or len(proposal.tokens) < 2:
            return proposal
        q = torch.cat([proposal.q[1:], proposal.q[-1:]])
        return Proposal(proposal.tokens, q, proposal.forwards, source=proposal.source)


class UnwarpedQ(MedusaProposer):
    """Planted bug: q reported as the heads' plain softmax (temperature 1, no top-k /
    top-p) while the drafts were sampled from the warped law."""

    def propose(self, ids, k, params, generator):
        proposal = super().propose(ids, k, params, generator)
        if proposal.q is None:
            return proposal
        n = len(proposal.tokens)
        q = torch.zeros_like(proposal.q)
        q[:, self.head.token_map] = torch.softmax(self.head(self._hidden[0], n), -1).to(q.dtype)
        return Proposal(proposal.tokens, q, proposal.forwards, source=proposal.source)


@pytest.mark.parametrize("bug, setting", [(QOffByOneHead, "t1"), (UnwarpedQ, "t0.9-topk6-topp0.9")])
def test_the_medusa_check_has_power(target, bug, setting):
    """A third of the samples suffice: while tuning, 500 gave p ≈ 1e-18 for the off-by-one head."""
    params = power.SETTINGS[setting]
    engine = medusa_engine(target, 3, proposer_class=bug)
    caught, where = planted_bug_caught(target, engine, params, SAMPLES // 3)
    assert caught, f"{bug.__name__}/{setting} not caught: chi-square {where}"


# --- candidate trees (draft_tree.py): head d's law for every child at depth d + 1 ----------

@pytest.mark.parametrize("model, setting, gamma, shape", [("llama", "t1", 2, "dynamic"),
                                                           ("table", "t0.9-topk6-topp0.9", 3, "first")])
def test_medusa_tree_joint_distribution_is_the_targets(target, model, setting, gamma, shape):
    params = power.SETTINGS[setting]
    target = model_target(model, target)
    engine = medusa_engine(target, gamma, 12, siblings=3, tree=shape)
    p = pvalue(target, engine, params)
    metrics = engine.metrics
    assert metrics.num_draft_tokens > 3 * SAMPLES and 0 < metrics.num_accepted_tokens
    assert p > ALPHA, f"{model}: medusa tree {shape} γ={gamma}/{setting}: chi-square p = {p:.2e}"


def test_medusa_tree_greedy_equals_plain(target):
    params = SamplingParams(temperature=0.0)
    plain = FoldedEngine(TransformersBackend(target), None, eos_token_ids=[])
    want = [t.id for s in plain.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    engine = medusa_engine(target, 3, draft_vocab=12, siblings=3, tree="dynamic")
    steps = list(engine.generate(PROMPT, params, max_new_tokens=24))
    assert [t.id for s in steps for t in s.tokens] == want
    assert max(s.stats.num_draft_tokens for s in steps) == 9  # three depths of three nodes


def test_the_medusa_tree_check_has_power(target):
    """Planted bug: every node reported with its depth's whole law, as if its earlier
    siblings had not been removed from it (drawn with replacement)."""
    from tests.support.mutations import mutant, patched

    stale = mutant(MedusaProposer._candidate_tree, [(
        "torch.cat([v.law for v in nodes])", "torch.cat([laws[v.depth - 1: v.depth] for v in nodes])")])
    params = power.SETTINGS["t1"]
    backend = TransformersBackend(target)
    head = random_medusa_head(target, num_heads=3, draft_vocab=12)  # sharp random heads: often rejected
    proposer = MedusaProposer(head, backend, 2, siblings=4, tree="dynamic")
    engine = FoldedEngine(backend, proposer, controller=power.EveryStep(2), eos_token_ids=[])
    with patched(MedusaProposer, "_candidate_tree", stale):
        caught, where = planted_bug_caught(target, engine, params, SAMPLES // 3)
    assert caught, f"tree laws drawn with replacement not caught: chi-square {where}"
