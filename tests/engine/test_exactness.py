"""Whole speculative generations have exactly the target's joint distribution.

For each sampling setting and proposer, thousands of seeded 3-token generations are
compared with the exact joint distribution, enumerated from the target alone, by a
chi-square test over the cells with an expected count of at least 5 (the rest pooled into
one cell). The false-alarm rate of each test is ALPHA = 1e-3; every test is seeded, so a
run is deterministic (the adaptive controller is fed a fixed cost model rather than
wall-clock times for that reason). ``test_the_check_has_power`` shows the same check
rejects a planted sampler bug, on either model.

Two targets, each with a draft that often agrees with it (float64, vocabulary 16):

* ``table``: tests/support/table_lm.py's table model behind the Backend seam, a forward a
  table lookup. The whole grid (every proposer × setting) runs on it: what the grid
  varies is the engine's logic (warping, acceptance, residuals, γ), which sees only logits,
  and a lookup costs a small fraction of a forward through transformers' layers.
* ``llama``: the tiny transformers Llama (tests/support/vocab16.py), through the
  transformers backend with its real KV cache, rolled back after rejections. Each
  proposer runs on it under one setting (the four settings shared out among them), so
  every proposer and every setting meets the real backend path; bfloat16 runs on it alone.

Same samples, same ALPHA, same test on both; the planted bug fails on each
(``test_the_check_has_power``).
"""

import dataclasses

import pytest
import torch
from scipy import stats

from specchat.engine import AdaptiveGamma, DraftModelProposer, NgramProposer, Proposal, SamplingParams
from specchat.engine.proposers.suffix import SuffixProposer
from specchat.engine.proposers.hybrid import NgramDraftProposer
from specchat.engine.proposers.suffix_store import SuffixStore
from specchat.engine.proposers import Proposer
from tests.support import power
from tests.support.folded import FoldedEngine
from tests.support import table_lm
from tests.support.table_lm import TableLM, noisy, random_table
from tests.support.vocab16 import exact_joint

ALPHA = 1e-3
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]
LENGTH = 3
SAMPLES = 2500

SETTINGS = {
    "t1": SamplingParams(temperature=1.0),
    "t0.7-topk5": SamplingParams(temperature=0.7, top_k=5),
    "t1.2-topp0.8": SamplingParams(temperature=1.2, top_p=0.8),
    "t0.9-topk6-topp0.9": SamplingParams(temperature=0.9, top_k=6, top_p=0.9),
}


class GreedyDraftPointMass(Proposer):
    """Point-mass drafts chosen deterministically from the past (the draft model's argmax),
    so point-mass acceptance is exercised often, unlike with random-model n-grams. The
    argmax after each context is remembered: the same few contexts recur in every sample,
    and a draft model's forward per drafted token was a third of a sample's time."""

    kind = "ngram"

    def __init__(self, model, k):
        super().__init__(k)
        self.model = model
        self._argmax: dict[tuple[int, ...], int] = {}  # context → the draft model's argmax after it

    def propose(self, ids, k, params, generator):
        seq = list(ids)
        for _ in range(k):
            seq.append(self._next(tuple(seq)))
        return Proposal(torch.tensor(seq[len(ids):]), None)

    def _next(self, context: tuple[int, ...]) -> int:
        if context not in self._argmax:
            if isinstance(self.model, TableLM):
                self._argmax[context] = int(self.model.logits_after(list(context)).argmax())
            else:
                self._argmax[context] = int(self.model(input_ids=torch.tensor([context])).logits[0, -1].argmax())
        return self._argmax[context]


class SteadyClockAdaptive(AdaptiveGamma):
    """The adaptive controller fed a fixed cost model instead of wall-clock times (plain
    step 10 ms, +1 ms per verified draft, 1 ms per drafted token): its choices then depend
    on the past tokens alone, so the test is deterministic, and they still vary with the
    acceptance it has seen. ``used`` counts the draft lengths the steps had."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.used = {}

    def observe(self, stats, proposal):
        k = stats.num_draft_tokens
        self.used[k] = self.used.get(k, 0) + 1
        steady = dataclasses.replace(stats, draft_ms=1.0 * k, total_ms=10.0 + 1.0 * k + 1.0 * k)
        super().observe(steady, proposal)


class WrongQ(DraftModelProposer):
    """Planted bug: reports q from the unwarped draft logits (temperature ignored)."""

    def propose(self, ids, k, params, generator):
        proposal = super().propose(ids, k, params, generator)
        q = proposal.q ** (1 / 3)
        return Proposal(proposal.tokens, q / q.sum(-1, keepdim=True), proposal.forwards)


def folded(target, proposer, controller=None) -> FoldedEngine:
    """The engine the checks sample from (the proposer's default controller unless one
    is given), without per-step forecasts: no check here reads one, and refitting the
    cost model for them was about 15 % of a sample on the table."""
    return power.without_forecasts(FoldedEngine(target, proposer, controller=controller, eos_token_ids=[]))


def sample_counts(engine, params, samples=SAMPLES):
    return power.sample_counts(engine, PROMPT, params, samples, LENGTH)


def chi_square_pvalue(counts, joint, samples=SAMPLES):
    impossible = [s for s in counts if joint.get(s, 0.0) == 0.0]
    assert not impossible, f"generated sequences the target gives probability 0: {impossible[:3]}"
    big = [s for s, pr in joint.items() if pr * samples >= 5]
    observed = [counts.get(s, 0) for s in big]
    expected = [joint[s] * samples for s in big]
    rest_expected = samples - sum(expected)
    if rest_expected > 1e-9:
        observed.append(samples - sum(observed))
        expected.append(rest_expected)
    return stats.chisquare(observed, expected).pvalue


def planted_bug_caught(engine, params, joint) -> tuple[bool, str]:
    """(caught, where): the same seeded samples and χ², looked at as they come
    (power.planted_bug_caught: a blatant plant stops early; a plant that changed nothing
    is "caught" with probability at most ALPHA, as by one test at SAMPLES)."""
    return power.planted_bug_caught(engine, PROMPT, params, SAMPLES, LENGTH,
                                    lambda counts, n: chi_square_pvalue(counts, joint, n), ALPHA)


def make_proposer(kind, target, draft):
    if kind == "draft":
        return DraftModelProposer(draft, 2)
    if kind == "draft-auto":
        return DraftModelProposer(draft, "auto", 3)
    if kind == "ngram":
        return NgramProposer(3, 1, 3)
    if kind == "ngram-draft":  # the hybrid of n-gram lookup and the draft model, γ = auto choosing between them
        return NgramDraftProposer(NgramProposer("auto", 1, 3, 3), DraftModelProposer(draft, "auto", 3), 3)
    if kind == "suffix":
        return SuffixProposer(3, 1, 3)
    if kind == "suffix-store":  # earlier replies that outvote the prompt's own "3 1 2 → 3": their drafts win
        return SuffixProposer(3, 1, 3, store=SuffixStore("0" * 64, 16, [[3, 1, 2, 7, 8, 9]] * 3))
    return GreedyDraftPointMass(draft, 2)


@pytest.fixture(scope="module")
def table_pair():
    """(target table, draft table): the draft the target's logits plus noise of 1.0, near enough
    that its argmax (the point-mass drafts) is often the target's likeliest token."""
    table = random_table(0)
    return table, noisy(table, 1, 1.0)


def models(name, target, draft, table_pair):
    """(target, draft, exact joint of the target) for the named model."""
    if name == "llama":
        return target, draft, exact_joint
    target_table, draft_table = table_pair
    return TableLM(target_table), TableLM(draft_table), table_lm.exact_joint


# every proposer under every setting on the table would double the grid; n-gram and the
# adaptive controller run under the plainest and the most filtered setting
TABLE_CASES = [(kind, setting) for kind in ("draft", "point-mass") for setting in SETTINGS] + [
    (kind, setting) for kind in ("ngram", "suffix", "draft-auto", "ngram-draft") for setting in ("t1", "t0.9-topk6-topp0.9")
] + [("suffix-store", "t1")]
# on the Llama: each proposer once, the four settings shared out among them
LLAMA_CASES = [("draft", "t1.2-topp0.8"), ("point-mass", "t0.7-topk5"), ("ngram", "t1"),
               ("draft-auto", "t0.9-topk6-topp0.9")]
CASES = [("table", kind, setting) for kind, setting in TABLE_CASES] + [
    ("llama", kind, setting) for kind, setting in LLAMA_CASES]


@pytest.mark.parametrize("model, kind, setting", CASES)
def test_joint_distribution_is_the_targets(target, draft, table_pair, model, kind, setting):
    target, draft, joint_of = models(model, target, draft, table_pair)
    params = SETTINGS[setting]
    proposer = make_proposer(kind, target, draft)
    controller = SteadyClockAdaptive(3, proposer) if kind in ("draft-auto", "ngram-draft") else None
    engine = folded(target, proposer, controller)
    joint = joint_of(target, PROMPT, LENGTH, params)
    counts = sample_counts(engine, params)
    if kind == "ngram-draft":  # both sources drafted
        assert {"ngram", "draft_model"} <= set(engine.metrics.drafts_by_source), engine.metrics.drafts_by_source
    elif controller is not None:  # the controller really varied γ, plain steps included
        assert controller.used.get(0, 0) >= 50 and sum(n >= 50 for k, n in controller.used.items() if k) >= 2, \
            controller.used
    metrics = engine.metrics
    assert metrics.num_draft_tokens > 0, "the proposer never drafted: the test would prove nothing"
    if kind not in ("ngram", "suffix", "suffix-store"):
        assert 0 < metrics.num_accepted_tokens < metrics.num_draft_tokens
    pvalue = chi_square_pvalue(counts, joint)
    assert pvalue > ALPHA, f"{model}: {kind}/{setting}: chi-square p = {pvalue:.2e}"


@pytest.mark.parametrize("model", ["table", "llama"])
def test_the_check_has_power(target, draft, table_pair, model):
    target, draft, joint_of = models(model, target, draft, table_pair)
    params = SamplingParams(temperature=0.6)
    engine = folded(target, WrongQ(draft, 2))
    caught, where = planted_bug_caught(engine, params, joint_of(target, PROMPT, LENGTH, params))
    assert caught, f"{model}: WrongQ not caught: chi-square {where}"


@pytest.fixture(scope="module")
def bf16_pair(target, draft):
    import copy

    return copy.deepcopy(target).to(torch.bfloat16), copy.deepcopy(draft).to(torch.bfloat16)


@pytest.mark.parametrize("kind", ["draft", "point-mass"])
def test_joint_distribution_is_the_targets_in_bfloat16(bf16_pair, kind):
    """The same check with target and draft in bfloat16, against the joint enumerated from
    the bf16 target itself. A batched verify and the enumeration's forwards round the
    logits differently by about one bf16 ULP (≈0.5 % in p at these magnitudes), far below
    what 2,500 samples resolve, so the false-alarm rate stays ALPHA. Plain temperature 1
    only: a top-k / top-p cut-off could move by a rounding step between the two."""
    target, draft = bf16_pair
    params = SETTINGS["t1"]
    engine = folded(target, make_proposer(kind, target, draft))
    counts = sample_counts(engine, params)
    assert 0 < engine.metrics.num_accepted_tokens < engine.metrics.num_draft_tokens
    pvalue = chi_square_pvalue(counts, exact_joint(target, PROMPT, LENGTH, params))
    assert pvalue > ALPHA, f"bf16 {kind}: chi-square p = {pvalue:.2e}"


def test_the_bfloat16_check_has_power(bf16_pair):
    target, draft = bf16_pair
    params = SamplingParams(temperature=0.6)
    engine = folded(target, WrongQ(draft, 2))
    caught, where = planted_bug_caught(engine, params, exact_joint(target, PROMPT, LENGTH, params))
    assert caught, f"bf16: WrongQ not caught: chi-square {where}"
