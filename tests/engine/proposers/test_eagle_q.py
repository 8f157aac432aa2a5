"""An EAGLE-3 head's reported q is the law its drafts were drawn from (engine/proposers/eagle.py).

Mutation trial: reporting q as the head's plain softmax (temperature 1, no top-k / top-p)
while the drafts are drawn from the warped law passed test_eagle_exactness.py and
test_tree_exactness.py (2,500 whole samples each: the random head's warped and plain laws
are close enough there). Here the first draft of 3,000 proposals from one context is
compared with the q reported with it (chi-square, ALPHA = 1e-3, seeded: as
test_exactness_steps.py checks a draft model's q), at settings where warping changes q.
"""

import pytest
import torch
from scipy import stats

from specchat.engine import SamplingParams, SpeculativeEngine
from tests.engine.proposers.test_hybrid import hybrid
from tests.engine.test_exactness import ALPHA, PROMPT
from tests.support import power

SAMPLES = 3000
# warping changes q at both; the support stays wide (with this head, top-p 0.9 keeps one id)
SETTINGS = {"t0.7-topk5": power.SETTINGS["t0.7-topk5"], "t0.7": SamplingParams(temperature=0.7)}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_heads_q_is_the_law_of_its_drafts(target, setting):
    backend, proposer = hybrid(target)  # the head beside n-gram lookup: its features queued every step
    engine = SpeculativeEngine(backend, proposer, controller=power.EveryStep(0), eos_token_ids=[])
    ids = list(PROMPT)
    for step in engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=3), max_new_tokens=6):
        ids += [t.id for t in step.tokens]
    head, params = proposer.head, SETTINGS[setting]
    generator = torch.Generator().manual_seed(11)
    counts, reported = torch.zeros(16, dtype=torch.float64), None
    for _ in range(SAMPLES):
        proposal = head.propose(ids, 1, params, generator)
        assert len(proposal.tokens) == 1  # the head had its context: it drafted
        if reported is None:
            reported = proposal.q[0].double()
        assert torch.equal(proposal.q[0].double(), reported)  # one context, one law
        counts[int(proposal.tokens[0])] += 1
    expected = reported * SAMPLES
    assert counts[expected == 0].sum() == 0, f"drafted ids its reported q gives probability 0: {counts}"
    keep = expected > 0
    assert int(keep.sum()) >= 2, reported  # a law with room to be wrong
    pvalue = stats.chisquare(counts[keep].numpy(), expected[keep].numpy()).pvalue
    assert pvalue > ALPHA, f"{setting}: χ² p = {pvalue:.2e}"
