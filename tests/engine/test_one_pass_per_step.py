"""The engine runs the target once per step (engine/engine.py): one forward over the new
ids and the step's drafts, asking k + 1 logits, whatever the proposer and the sampling.
A second pass would give the same tokens (the cache makes it cheap to get wrong and
costly to run), so only counting finds it. Planted bug: the step decodes twice — caught.
"""

from __future__ import annotations

import pytest

from specchat.engine import DraftModelProposer, NgramProposer, SamplingParams
from specchat.engine import engine as engine_module
from specchat.engine.backends.transformers import TransformersBackend
from specchat.engine.engine import SpeculativeEngine
from tests.support.mutations import mutant, patched

PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


class Counted(TransformersBackend):
    """The transformers backend, writing down each forward's number of logits asked."""

    def __init__(self, model) -> None:
        super().__init__(model)
        self.passes: list[int] = []

    def forward(self, ids, extra=None, num_logits=1):
        self.passes.append(num_logits)
        return super().forward(ids, extra, num_logits)

    def forward_tree(self, ids, tokens, parents):
        self.passes.append(len(tokens) + 1)
        return super().forward_tree(ids, tokens, parents)


@pytest.mark.parametrize("kind", ["plain", "draft-3", "draft-auto", "ngram"])
@pytest.mark.parametrize("params", [SamplingParams(temperature=0), SamplingParams(temperature=1.0, seed=5)])
def test_one_target_pass_per_step_asking_k_plus_one_logits(target, draft, kind, params):
    proposer = {"plain": lambda: None, "draft-3": lambda: DraftModelProposer(draft, 3),
                "draft-auto": lambda: DraftModelProposer(draft, "auto", 6),
                "ngram": lambda: NgramProposer(4, 1, 3)}[kind]()
    backend = Counted(target)
    engine = SpeculativeEngine(backend, proposer, eos_token_ids=[])
    for step in engine.generate(PROMPT, params, max_new_tokens=30):
        before, backend.passes = backend.passes, []
        assert before == [step.stats.num_draft_tokens + 1], (kind, step.stats)
    assert backend.passes == []


def test_planted_a_step_that_runs_the_target_twice_is_caught(target, draft):
    bug = mutant(engine_module.step, [("    logits = runner.decode(seqs, proposals)\n",
                                       "    runner.decode(seqs, proposals)\n    logits = runner.decode(seqs, proposals)\n")])
    with patched(engine_module, "step", bug), pytest.raises(AssertionError):
        test_one_target_pass_per_step_asking_k_plus_one_logits(target, draft, "draft-3", SamplingParams(temperature=0))
