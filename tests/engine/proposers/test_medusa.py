"""Medusa-1 heads (tests/support/tiny_heads.py) on the tiny float64 target's final hidden
states: what the heads read, which head drafts which position, greedy chains and trees
equal plain decoding, and the exactness check has power.

The joint-distribution cases (chains and candidate trees, on the table model and the
Llama) are rows of test_exactness.py's one test over the methods. The planted bugs here
run through the same batched samples (tests/support/batched.py) and the chi-square that
pools rare cells per prefix only (power.tree_chi_square, ALPHA = 1e-3): a proposer whose
reported q is off by one head (draft j reported with head j's law instead of head
j − 1's), one that reports the heads' plain softmax instead of the warped law the drafts
were sampled from (at T = 0.9 with top-k and top-p), and a tree whose nodes are reported
with their depth's whole law (drawn with replacement). Medusa cannot draft before the
target has run the prompt, so each 5-token sample's first step is plain.
"""

import pytest
import torch

from specchat.engine import SamplingParams
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.proposers import Proposal
from specchat.engine.proposers.medusa import MedusaProposer
from tests.engine.test_exactness import ALPHA, PROMPT
from tests.support import power
from tests.support.batched import Case
from tests.support.table_lm import next_laws
from tests.support.vocab16 import laws_of
from tests.support.folded import FoldedEngine
from tests.support.tiny_heads import random_medusa_head

SAMPLES = 1500
LENGTH = 5  # a plain first step, then drafting steps of full chains


def planted_bug_caught(target, params, proposer, gamma=3, samples=SAMPLES // 3) -> tuple[bool, str]:
    """(caught, where): batched samples of ``proposer(lane)`` on the Llama, every step
    drafting ``gamma``, by the χ² that pools per prefix (power.planted_bug_caught: a plant
    that changed nothing is "caught" with probability at most ALPHA, as by one test at
    ``samples``; a blatant one stops at 2/5 of them)."""
    laws = next_laws(laws_of(target), PROMPT, params)
    case = Case(laws_of(target), proposer, lambda p: power.EveryStep(gamma), target)
    return power.planted_bug_caught(case, PROMPT, params, samples, LENGTH,
                                    lambda counts, n: power.tree_chi_square(counts, laws), ALPHA)


def medusa_engine(target, gamma=2, draft_vocab=None, **tree):
    """Heads on the Llama started from its lm_head plus noise as large as its weights: drafts
    are often kept, and the heads' laws differ enough that a q from the wrong head shows."""
    backend = TransformersBackend(target)
    head = random_medusa_head(target, num_heads=3, draft_vocab=draft_vocab, like_target=1.0)
    return FoldedEngine(backend, MedusaProposer(head, backend, gamma, **tree), controller=power.EveryStep(gamma),
                        eos_token_ids=[])


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
    head = random_medusa_head(target, num_heads=3, like_target=1.0)
    caught, where = planted_bug_caught(target, power.SETTINGS[setting], lambda lane: bug(head, lane, 3))
    assert caught, f"{bug.__name__}/{setting} not caught: chi-square {where}"


# --- candidate trees (draft_tree.py): head d's law for every child at depth d + 1 ----------

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
    head = random_medusa_head(target, num_heads=3, draft_vocab=12)  # sharp random heads: often rejected
    with patched(MedusaProposer, "_candidate_tree", stale):
        caught, where = planted_bug_caught(target, power.SETTINGS["t1"],
                                           lambda lane: MedusaProposer(head, lane, 2, siblings=4, tree="dynamic"), gamma=2)
    assert caught, f"tree laws drawn with replacement not caught: chi-square {where}"
