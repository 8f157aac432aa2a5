"""Trees of drafts (engine/trees/walk.py): greedy trees equal plain decoding, point-mass
siblings are one categorical draw, dynamic trees place their nodes where the head is
confident and within the backend's leaves, and the exactness check has power against
planted tree bugs.

The joint-distribution cases of trees are rows of test_exactness.py's one test over the
methods. The planted bugs here — rivals reported with the law before the earlier
siblings were removed, and a drawn child kept only when the head scored it well — run
through the same batched samples and chi-square (ALPHA = 1e-3), and each fails it."""

import pytest
import torch

from specchat.engine import SamplingParams
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.proposers import Proposal
from specchat.engine.proposers.eagle import EagleProposer
from specchat.engine.trees.walk import walk
from tests.engine.test_exactness import ALPHA, LENGTH, PROMPT, pvalue_of
from tests.support import power
from tests.support.batched import Case
from tests.support.folded import FoldedEngine
from tests.support.mutations import mutant, patched
from tests.support.tiny_heads import random_eagle3_head
from tests.support.vocab16 import laws_of

SAMPLES = 2500


def tree_engine(target, siblings=3, gamma=2, proposer_class=EagleProposer, scale=1.5, tree="first"):
    backend = TransformersBackend(target)
    head = random_eagle3_head(target, draft_vocab=12, scale=scale)
    proposer = proposer_class(head, backend, gamma, siblings=siblings, tree=tree)
    return FoldedEngine(backend, proposer, controller=power.EveryStep(gamma), eos_token_ids=[])


def planted_bug_caught(target, params, siblings=3, gamma=2, proposer_class=EagleProposer, tree="first"):
    """(caught, where): the group-sequential χ² of power.planted_bug_caught over batched
    samples of a tree with a sharp head (scale 3) on the Llama (the same seeds, looks at
    1,000, 1,500 and 2,000 samples; a plant that changed nothing is "caught" with
    probability at most ALPHA). Both plants here are caught at the 1,000th or 2,000th sample."""
    head = random_eagle3_head(target, draft_vocab=12, scale=3.0)
    case = Case(laws_of(target), lambda lane: proposer_class(head, lane, gamma, siblings=siblings, tree=tree),
                lambda p: power.EveryStep(gamma), target)
    return power.planted_bug_caught(case, PROMPT, params, SAMPLES, LENGTH, pvalue_of(laws_of(target), params, LENGTH),
                                    ALPHA)


# "first": a chain of 3 and two rivals; "dynamic": three depths of three nodes
@pytest.mark.parametrize("shape, most_drafts", [("first", 5), ("dynamic", 9)])
def test_tree_greedy_equals_plain(target, shape, most_drafts):
    params = SamplingParams(temperature=0.0)
    plain = FoldedEngine(TransformersBackend(target), None, eos_token_ids=[])
    want = [t.id for s in plain.generate(PROMPT, params, max_new_tokens=24) for t in s.tokens]
    engine = tree_engine(target, siblings=3, gamma=3, tree=shape)
    steps = list(engine.generate(PROMPT, params, max_new_tokens=24))
    assert [t.id for s in steps for t in s.tokens] == want
    assert max(s.stats.num_draft_tokens for s in steps) == most_drafts


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
    caught, where = planted_bug_caught(target, SamplingParams(temperature=1.0), siblings=4, proposer_class=StaleRivalLaw)
    assert caught, where


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


# --- EAGLE-2-style dynamic trees (engine/trees/grow.py, trees/eagle.py) ---

def test_a_dynamic_tree_places_nodes_where_the_head_is_confident(target):
    """Greedy, a head whose law is peaked: the likeliest first draft gets more of the
    second depth's nodes than its rivals, and every node's parent comes before it."""
    from specchat.engine.trees.eagle import dynamic_tree

    backend = TransformersBackend(target)
    proposer = EagleProposer(random_eagle3_head(target, draft_vocab=12, scale=3.0), backend, 3, siblings=3,
                             tree="dynamic")
    engine = FoldedEngine(backend, proposer, controller=power.EveryStep(3), eos_token_ids=[])
    list(engine.generate(PROMPT, SamplingParams(temperature=0.0), max_new_tokens=4))
    last = len(PROMPT) + 3
    proposer._cache.truncate(last + 1)
    nodes, forwards = dynamic_tree(proposer.drafter, proposer._cache, proposer._cache.tail, last, 3, 3,
                                   SamplingParams(temperature=0.0), None, proposer._draft_ids)
    assert forwards == 3 and [v.depth for v in nodes] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert all(v.parent < i for i, v in enumerate(nodes))
    firsts = [v.est for v in nodes[:3]]
    assert firsts == sorted(firsts, reverse=True)  # greedy: the head's best ids in order
    under = [sum(1 for v in nodes[3:6] if v.parent == i) for i in range(3)]
    assert under[0] >= max(under[1:]), (firsts, under)


def test_keeping_only_well_scored_draws_breaks_exactness(target):
    """Planted bug: a drawn child is kept only when the head gave it at least 0.2 — its
    inclusion then depends on its own value, so the law it was drawn from is no longer
    the law it is verified against. The chi-square sees it."""
    from specchat.engine.trees import grow as draft_tree

    choosy = mutant(draft_tree.grow, [(
        "            child = _draw(parent, params, generator)\n",
        "            child = _draw(parent, params, generator)\n"
        "            if float(parent.q[0, child.token]) < 0.2:\n"
        "                continue\n")])
    with patched(draft_tree, "grow", choosy):
        caught, where = planted_bug_caught(target, SamplingParams(temperature=1.0), tree="dynamic")
    assert caught, where


def test_a_dynamic_tree_keeps_within_the_backends_leaves(target):
    """llama.cpp verifies a tree with one sequence per leaf (at most 8): past the cap a
    new node may only extend a leaf."""
    from specchat.engine.trees.eagle import dynamic_tree
    from specchat.engine.trees.walk import walk  # noqa: F401 (the shape is what tree.py walks)

    backend = TransformersBackend(target)
    proposer = EagleProposer(random_eagle3_head(target, draft_vocab=12, scale=1.0), backend, 4, siblings=4,
                             tree="dynamic")
    engine = FoldedEngine(backend, proposer, controller=power.EveryStep(1), eos_token_ids=[])
    list(engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=3), max_new_tokens=3))
    last = len(backend.ids) - 1
    proposer._cache.truncate(last + 1)
    for seed in range(20):
        nodes, _ = dynamic_tree(proposer.drafter, proposer._cache, proposer._cache.tail, last, 4, 4,
                                SamplingParams(temperature=1.0), torch.Generator().manual_seed(seed),
                                proposer._draft_ids, max_leaves=3)
        proposer._cache.truncate(last + 1)
        parents = {v.parent for v in nodes}
        assert max(v.depth for v in nodes) == 4 and sum(1 for i in range(len(nodes)) if i not in parents) <= 3
