"""Every chain proposer runs in a batch (engine/batch/batched.py, lanes.py), on the real
embedded GGUF.

* A head reads, on its request's lane, the target's layer inputs for exactly the rows that
  request ran: each row a lane hands out is nearest (Euclidean) to the row a one-sequence
  decode gives for the same prefix, among every request's rows (no tolerance to choose: a
  batch rounds a little differently, another prefix's row is far).
  Planted bug: features sliced from the batch's first row for every sequence — fails.
* A draft model drafts, per request, in a sequence of its own in one batch context of the
  draft (SequenceBackend): three requests drafting together reply as each does alone (greedy:
  the same ids up to a near-tie, the same drafts kept).
* What a batch cannot run is one line before anything runs: a tree (siblings > 1) and
  Medusa heads.
"""

from __future__ import annotations

import pytest
import torch

from specchat.engine.batch.batched import BatchedEngine, Request, _Together
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.proposers import DraftModelProposer, Proposal, Proposer
from specchat.engine.sampling import SamplingParams
from specchat.loading.gguf_tokenizer import GgufTokenizer
from tests.support.mutations import mutant, patched
from tests.engine.batch.test_batched import near_tie_or_equal
from tests.support.needs import embedded_llama_backend, needs_llama_cpp

pytestmark = needs_llama_cpp
LAYERS = (2, 15)
QUESTIONS = ["Describe a city.", "List some fruits.", "Write a poem about the sea."]
GREEDY = SamplingParams(temperature=0.0)
TOKENS = 24


@pytest.fixture(scope="module")
def backend():
    return embedded_llama_backend(max_ctx=2048)


@pytest.fixture(scope="module")
def prompts(backend):
    tokenizer = GgufTokenizer(backend.llm)
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]


class Reader(Proposer):
    """Drafts ``k`` copies of the last token (point masses) and keeps, after each verdict,
    what its lane handed out: (features_start, the rows)."""

    kind = "reader"
    point_mass = True

    def __init__(self, lane, k: int) -> None:
        super().__init__(k)
        self.lane, self.read, self.k = lane, [], 0
        lane.request_features(LAYERS)

    def propose(self, ids, k, params, generator):
        self.k = k
        return Proposal(torch.tensor([ids[-1]] * k, dtype=torch.long), None, source=self.kind)

    def observe(self, num_accepted):
        rows = self.lane.last_features
        self.read.append((self.lane.features_start, rows[:len(rows) - (self.k - num_accepted)].clone()))
        self.k = 0


def misfiled(backend, prompts) -> tuple[int, list]:
    """(rows the lanes handed out, those nearer another prefix's row of a one-sequence decode
    than their own's)."""
    readers = []

    def factory(lane):
        readers.append(Reader(lane, 1 + len(readers)))
        return readers[-1]

    engine = BatchedEngine(backend, n_seq=len(prompts), proposer_factory=factory)
    ids = [list(p) for p in prompts]
    try:
        for i, step in engine.generate([Request(p, GREEDY, 12) for p in prompts]):
            ids[i] += [t.id for t in step.tokens]
    finally:
        engine.close()
    backend.request_features(LAYERS)
    keys, alone = [], []
    for r, seq in enumerate(ids):
        backend.reset()
        backend.forward(seq)
        # a row is its prefix's: requests share the chat template's first tokens, rows and all
        keys += [tuple(seq[:backend.features_start + j + 1]) for j in range(len(backend.last_features))]
        alone.append(backend.last_features)
    table = torch.cat(alone)
    handed = [(tuple(ids[r][:start + j + 1]), row) for r, reader in enumerate(readers)
              for start, block in reader.read for j, row in enumerate(block)]
    nearest = [keys[int(torch.cdist(row[None], table).argmin())] for _, row in handed]
    return len(handed), [(len(key), len(near)) for (key, _), near in zip(handed, nearest) if near != key]


def test_a_lane_hands_out_the_layer_inputs_of_its_own_rows(backend, prompts):
    handed, wrong = misfiled(backend, prompts)
    assert handed > sum(map(len, prompts)) and not wrong, wrong[:5]


def test_planted_features_sliced_from_the_first_row_are_caught(backend, prompts):
    bug = mutant(_Together.decode, [("features[first:first + len(s.ids) - s.cached + k]",
                                     "features[0:len(s.ids) - s.cached + k]")])
    with patched(_Together, "decode", bug):
        handed, wrong = misfiled(backend, prompts)
    assert wrong


def test_draft_models_drafting_together_reply_as_each_does_alone(backend, prompts):
    draft = embedded_llama_backend(max_ctx=2048)
    drafts = draft.open_batch(len(prompts), 512)
    engine = BatchedEngine(backend, n_seq=len(prompts),
                           proposer_factory=lambda lane: DraftModelProposer(drafts.lane(lane.seq), 3))
    together = [[] for _ in prompts]
    kept = 0
    try:
        for i, step in engine.generate([Request(p, GREEDY, TOKENS) for p in prompts]):
            together[i] += [t.id for t in step.tokens]
            kept += step.stats.num_accepted_tokens
    finally:
        engine.close()
        drafts.close()
    for ids, got in zip(prompts, together):
        draft.reset()
        backend.reset()
        alone = [t.id for s in SpeculativeEngine(backend, DraftModelProposer(draft, 3)).generate(ids, GREEDY, TOKENS)
                 for t in s.tokens]
        assert near_tie_or_equal(backend, ids, got, alone) is None
    assert kept > 0


def test_a_lanes_controller_keeps_what_it_measured_for_the_next_request(backend, prompts):
    """A lane's proposer serves request after request, and so does its γ = auto controller:
    the second request's first step already has the cost model's recommendation (a fresh
    controller has measured nothing yet and has none)."""
    draft = embedded_llama_backend(max_ctx=2048)
    drafts = draft.open_batch(1, 1024)
    made = {}

    def factory(lane):
        made.setdefault(lane.seq, DraftModelProposer(drafts.lane(lane.seq), "auto", 4))
        return made[lane.seq]

    engine = BatchedEngine(backend, n_seq=1, proposer_factory=factory)
    try:
        firsts = []
        for ids in prompts[:2]:
            steps = [step for _, step in engine.generate([Request(ids, GREEDY, 40)])]
            firsts.append(steps[0].stats.recommended_gamma)
    finally:
        engine.close()
        drafts.close()
    assert firsts[0] is None and firsts[1] is not None, firsts


@pytest.mark.parametrize("table, says", [
    ({"method": "eagle3", "siblings": 2}, "verifies chains of drafts, not the tree speculation.siblings = 2"),
    ({"method": "medusa"}, "cannot run speculation.method = 'medusa'"),
])
def test_what_a_batch_cannot_run_is_one_line(table, says):
    from specchat.config.model import SpeculationSpec
    from specchat.engine.batch.lanes import check_batchable
    from specchat.errors import SpecchatError

    with pytest.raises(SpecchatError) as raised:
        check_batchable(SpeculationSpec(**table), "serve")
    assert says in str(raised.value) and "\n" not in str(raised.value)
