"""What a tree step reports: its drafts may outnumber γ, and only its kept path's positions
were judged.

* A dynamic tree of 8 nodes a depth, γ = 3, drafts 24 tokens a step: such a step is
  recorded and read back (the recording check bounds a step's drafts by the largest tree,
  not by γ's ceiling of 16), and its telemetry folds.
* The cost model learns acceptance by position from a tree's kept path only: a walk that
  ended at a leaf after 3 kept drafts judged no 4th position, so none is recorded as
  rejected (the 8 other nodes of its 9 were never on the path). Planted bug: the model
  reading num_draft_tokens as the positions judged, as for a chain, records a rejection
  at position 4 and fails it.
"""

from __future__ import annotations

import pytest

from specchat.engine import SamplingParams, SpeculativeEngine
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.gamma.cost_model import CostModel
from specchat.engine.proposers.eagle import EagleProposer
from specchat.events import StepEvent, StepStats, from_json, to_json
from specchat.sessions.validate import check_record
from specchat.telemetry import Telemetry
from tests.engine.test_exactness import PROMPT
from tests.support import power
from tests.support.mutations import mutant, patched
from tests.support.tiny_heads import random_eagle3_head


def test_a_wide_tree_step_is_recorded_and_read_back(target):
    backend = TransformersBackend(target)
    proposer = EagleProposer(random_eagle3_head(target, draft_vocab=12, scale=1.5), backend, 3, siblings=8,
                             tree="dynamic")
    engine = SpeculativeEngine(backend, proposer, controller=power.EveryStep(3), eos_token_ids=[])
    steps = list(engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=1), max_new_tokens=12))
    wide = [s for s in steps if s.stats.num_draft_tokens > 16]
    assert wide, [s.stats.num_draft_tokens for s in steps]
    telemetry = Telemetry()
    for step in steps:
        record = to_json(StepEvent(turn=1, step=step, t=0.1))
        check_record(record)
        again = from_json(record)
        assert again.step.stats == step.stats
        telemetry.update(again.step.stats, len(again.step.tokens))
        positions = step.stats.verified_positions
        if step.stats.num_draft_tokens:
            assert positions in (step.stats.num_accepted_tokens, step.stats.num_accepted_tokens + 1)


@pytest.mark.parametrize("planted", [False, True], ids=["healthy", "nodes-read-as-positions"])
def test_a_tree_teaches_acceptance_from_its_kept_path_only(planted):
    model = CostModel(max_gamma=8)
    stats = StepStats(num_speculative_tokens=3, num_draft_tokens=9, num_accepted_tokens=3, verified_positions=3,
                      total_ms=20.0, draft_ms=2.0)
    blind = mutant(CostModel.observe, [(
        "k if stats.verified_positions is None else stats.verified_positions", "k")])
    if planted:
        with patched(CostModel, "observe", blind):
            model.observe(stats, "key", "eagle3")
    else:
        model.observe(stats, "key", "eagle3")
    judged = [e.seen for e in model.acceptance("key")]
    if planted:
        assert judged[3] == 1  # the bug: a position no draft stood at, recorded as rejected
    else:
        assert judged[:4] == [1, 1, 1, 0] and not any(judged[3:])


@pytest.mark.parametrize("planted", [False, True], ids=["healthy", "nodes-read-as-depths"])
def test_a_tree_step_folds_into_the_panel_by_depth(planted):
    """A γ = 3 tree of 24 nodes that kept 2: the panel's per-position acceptance, histogram
    and γ history speak of 3 depths, as for a chain of 3. Planted bug: folding its node
    count as positions, as for a chain, grows 24 positions and a 25-bin histogram."""
    stats = StepStats(num_speculative_tokens=3, num_draft_tokens=24, num_accepted_tokens=2, verified_positions=3,
                      total_ms=20.0, draft_ms=2.0, draft_source="eagle3")
    telemetry = Telemetry()
    as_chain = mutant(StepStats.depth.fget, [(  # the source's @property makes it a property again
        "return k if self.verified_positions is None else", "return k if True else")])
    if planted:
        with patched(StepStats, "depth", as_chain):
            telemetry.update(stats, 3)
    else:
        telemetry.update(stats, 3)
    snap = telemetry.snapshot()
    if planted:
        assert len(snap.per_position_acceptance) == 24 and len(snap.acceptance_histogram) == 25
    else:
        assert snap.per_position_acceptance == (1.0, 1.0, 0.0)
        assert len(snap.acceptance_histogram) == 9 and snap.acceptance_histogram[2] == 1
        assert snap.gamma_history == (3,) and snap.alpha_empirical == pytest.approx(2 / 3)
