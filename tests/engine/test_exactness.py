"""Whole speculative generations have exactly the target's joint distribution, for every
method in specchat/methods.py.

One test, parametrised over ROWS: each row a method (its proposer built by the app's own
factory from a ``[speculation]`` table, so a new model-free method needs no line here
beyond its row), a target, a sampling setting and the method's options. A row draws its
seeded 3-token generations in one batch (tests/support/batched.py: seed i is the i-th
sequence of the engine's ``step``) and compares them with the exact joint distribution,
enumerated from the target alone once per target and setting, by a chi-square over the
cells with an expected count of at least 5 (the rest pooled into one cell); rows of 5
tokens use the chi-square that pools per prefix only (power.tree_chi_square). The
false-alarm rate of each row is ALPHA = 1e-3; every row is seeded, so a run is
deterministic (the adaptive controller is fed a fixed cost model rather than wall-clock
times for that reason). ``test_the_check_has_power`` shows the same check rejects a
planted sampler bug on each target.

Targets (float64, vocabulary 16), each with a draft that often agrees with it:

* ``table``: tests/support/table_lm.py's table model, a forward a table lookup, with
  hidden states for heads. The whole grid runs on it: what the grid varies is the
  engine's logic (warping, acceptance, residuals, γ, trees), which sees only logits.
* ``llama``: the tiny transformers Llama (tests/support/vocab16.py): its laws come from
  full forwards, and the batch's first sequences also run on the transformers backend,
  whose logits (through its KV cache, rollbacks and tree mask) must equal them.
* ``bf16``: the Llama and its draft in bfloat16, against the law of the bf16 target
  itself (a batched forward and the enumeration's round by about one ULP, far below what
  2,500 samples resolve); plain temperature 1 only, where no cut-off can move.
"""

import copy
import dataclasses
import functools
from types import SimpleNamespace

import pytest
import torch
from scipy import stats

from specchat.config.model import SpeculationSpec
from specchat.engine import AdaptiveGamma, DraftModelProposer, Proposal, SamplingParams
from specchat.engine.factory import build_proposer
from specchat.engine.proposers import Proposer
from specchat.engine.proposers.suffix_store import SuffixStore
from specchat.methods import METHODS
from tests.support import power, table_lm
from tests.support.batched import Case, shared
from tests.support.tiny_heads import random_eagle3_head, random_medusa_head
from tests.support.vocab16 import laws_of

ALPHA = 1e-3
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]
LENGTH = 3
SAMPLES = 2500
SETTINGS = power.SETTINGS


class GreedyDraftPointMass(Proposer):
    """Point-mass drafts chosen deterministically from the past (the draft model's argmax),
    so point-mass acceptance is exercised often, unlike with random-model n-grams."""

    kind = "ngram"

    def __init__(self, lm, k):
        super().__init__(k)
        self.lm = lm  # a table_lm.ContextLM: its laws are memoised

    def propose(self, ids, k, params, generator):
        seq = list(ids)
        for _ in range(k):
            seq.append(int(self.lm.logits_after(seq).argmax()))
        return Proposal(torch.tensor(seq[len(ids):]), None)


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


class Alternate(power.EveryStep):
    """γ every step, a hybrid's source alternating between n-gram lookup and the head (one
    sequence's, or, shared by a batch, half the sequences starting on each)."""

    def __init__(self, gamma: int, proposer: Proposer | None = None) -> None:
        super().__init__(gamma)
        self.proposer, self.steps = proposer, 0

    def choose(self, ids):
        self.steps += 1
        self.proposer.select("ngram" if self.steps % 2 else "eagle3")
        return self.gamma, None


class WrongQ(DraftModelProposer):
    """Planted bug: reports q from the unwarped draft logits (temperature ignored)."""

    def propose(self, ids, k, params, generator):
        proposal = super().propose(ids, k, params, generator)
        q = proposal.q ** (1 / 3)
        return Proposal(proposal.tokens, q / q.sum(-1, keepdim=True), proposal.forwards)


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


def pvalue_of(target, params, length):
    """(counts, n) → the p-value against the target's exact law: the joint chi-square at
    LENGTH, the per-prefix one past it."""
    if length == LENGTH:
        joint = table_lm.exact_joint(target, PROMPT, length, params)
        return lambda counts, n: chi_square_pvalue(counts, joint, n)
    laws = table_lm.next_laws(target, PROMPT, params)
    return lambda counts, n: power.tree_chi_square(counts, laws)


# --- the targets --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Models:
    target: table_lm.ContextLM  # its laws, and a lane per sequence
    draft: table_lm.ContextLM
    base: object  # what a head is shaped from (the transformers model, or the table)
    shadow: torch.nn.Module | None = None  # run for real beside the lanes


@functools.lru_cache(maxsize=None)
def table_models() -> Models:
    """The draft the target's logits plus noise of 1.0, near enough that its argmax (the
    point-mass drafts) is often the target's likeliest token."""
    table = table_lm.random_table(0)
    target = table_lm.FeatureTableLM(table)
    return Models(target, table_lm.TableLM(table_lm.noisy(table, 1, 1.0)), target)


@pytest.fixture(scope="module")
def bf16_pair(target, draft):
    return copy.deepcopy(target).to(torch.bfloat16), copy.deepcopy(draft).to(torch.bfloat16)


@pytest.fixture
def models(request, target, draft):
    def of(name: str) -> Models:
        if name == "table":
            return table_models()
        if name == "llama":
            return Models(laws_of(target), laws_of(draft), target, shadow=target)
        bf16_target, bf16_draft = request.getfixturevalue("bf16_pair")
        return Models(laws_of(bf16_target), laws_of(bf16_draft), bf16_target)
    return of


# --- the rows -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Row:
    method: str  # a name in specchat.methods, or "point-mass" (GreedyDraftPointMass)
    model: str  # "table", "llama" or "bf16"
    setting: str
    gamma: int | str = 2  # "auto": the steady-clock adaptive controller, ceiling 3
    controller: str = ""  # "every-step" (γ every step), "alternate" (hybrid), "": the method's own
    siblings: int = 1
    tree: str = "first"
    draft_vocab: int | None = 12  # a head's draft vocabulary (None: all 16 ids)
    scale: float = 3.0  # an EAGLE-3 head's sharpness
    length: int = LENGTH
    samples: int = SAMPLES
    store: bool = False  # suffix decoding with earlier replies that outvote the prompt's own

    def __str__(self) -> str:
        extra = [f"g{self.gamma}"] + ([f"{self.tree}{self.siblings}"] if self.siblings > 1 else [])
        return "-".join([self.method, self.model, self.setting, *extra] + (["store"] if self.store else []))


ROWS = [Row("none", "table", "t1")]
ROWS += [Row("draft_model", "table", s) for s in SETTINGS] + [Row("point-mass", "table", s) for s in SETTINGS]
ROWS += [Row(m, "table", s, gamma=3) for m in ("ngram", "suffix") for s in ("t1", "t0.9-topk6-topp0.9")]
ROWS += [Row("suffix", "table", "t1", gamma=3, store=True)]
ROWS += [Row(m, "table", s, gamma="auto") for m in ("draft_model", "ngram_draft") for s in ("t1", "t0.9-topk6-topp0.9")]
# on the Llama: each proposer once, the four settings shared out among them; bf16 at T = 1
ROWS += [Row("draft_model", "llama", "t1.2-topp0.8"), Row("point-mass", "llama", "t0.7-topk5"),
         Row("ngram", "llama", "t1", gamma=3), Row("draft_model", "llama", "t0.9-topk6-topp0.9", gamma="auto"),
         Row("draft_model", "bf16", "t1"), Row("point-mass", "bf16", "t1")]
# heads draft on every step; the table's trees are as sharp as the planted-bug tests' (scale 3):
# rivals often collide with the first draft, so a law reported with replacement shows
EAGLE = dict(controller="every-step")
ROWS += [Row("eagle3", "table", "t1", **EAGLE), Row("eagle3", "table", "t0.7-topk5", gamma=3, **EAGLE),
         Row("eagle3", "table", "t0.9-topk6-topp0.9", **EAGLE),
         Row("eagle3", "llama", "t0.9-topk6-topp0.9", gamma=3, **EAGLE),
         Row("eagle3", "llama", "t0.9-topk6-topp0.9", siblings=3, scale=1.5, **EAGLE),
         Row("eagle3", "llama", "t1", gamma=3, siblings=3, tree="dynamic", scale=1.5, **EAGLE),
         Row("eagle3", "table", "t1", siblings=3, **EAGLE),
         Row("eagle3", "table", "t0.9-topk6-topp0.9", gamma=3, siblings=3, tree="dynamic", **EAGLE)]
ROWS += [Row("hybrid", m, s, gamma="auto", controller="alternate") for m, s in
         (("table", "t1"), ("llama", "t0.9-topk6-topp0.9"))]
# Medusa cannot draft before the target has run the prompt: 5-token samples hold one or two
# drafting steps of full chains (heads on the Llama started from its lm_head: often kept)
MEDUSA = dict(controller="every-step", length=5, samples=1500)
ROWS += [Row("medusa", "table", "t1", draft_vocab=None, **MEDUSA),
         Row("medusa", "llama", "t0.9-topk6-topp0.9", gamma=3, **MEDUSA),
         Row("medusa", "llama", "t1", siblings=3, tree="dynamic", **MEDUSA),
         Row("medusa", "table", "t0.9-topk6-topp0.9", gamma=3, siblings=3, **MEDUSA)]


def head_of(row: Row, models: Models):
    if row.method in ("eagle3", "hybrid"):
        return random_eagle3_head(models.base, draft_vocab=row.draft_vocab, scale=row.scale)
    if row.method == "medusa":
        return random_medusa_head(models.base, num_heads=3, draft_vocab=row.draft_vocab,
                                  like_target=0.0 if row.model == "table" else 1.0)
    return None


def case_of(row: Row, models: Models) -> tuple[Case, object]:
    """(the row's Case, its shared controller or None)."""
    spec = SpeculationSpec(method=row.method if row.method in METHODS else "ngram", num_speculative_tokens=row.gamma,
                           max_speculative_tokens=4 if row.method == "hybrid" else 3, siblings=row.siblings,
                           tree=row.tree)
    head = head_of(row, models)

    def proposer(lane):
        if row.method == "point-mass":
            return GreedyDraftPointMass(models.draft, row.gamma)
        built = build_proposer(spec, SimpleNamespace(target=lane, draft=models.draft.lane(), head=head))
        if row.store:
            built.store = SuffixStore("0" * 64, 16, [[3, 1, 2, 7, 8, 9]] * 3)
        return built

    controller = None
    if row.controller == "every-step":
        return Case(models.target, proposer, lambda p: power.EveryStep(row.gamma), models.shadow), None
    if row.controller == "alternate":
        controller = Alternate(2)
    elif row.gamma == "auto":
        controller = SteadyClockAdaptive(3)
    # batches of 50: the controller learns between them, as it learnt from seed to seed
    return Case(models.target, proposer, controller and shared(controller), models.shadow, 50), controller


def test_every_method_has_rows():
    assert set(METHODS) <= {row.method for row in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_joint_distribution_is_the_targets(models, row):
    m = models(row.model)
    params = SETTINGS[row.setting]
    case, controller = case_of(row, m)
    sampled = power.sample_counts(case, PROMPT, params, row.samples, row.length)
    metrics = sampled.metrics
    if row.method == "none":
        assert metrics.num_draft_tokens == 0
    else:
        least = row.samples * (2 if row.siblings > 1 else 1) // 2
        assert metrics.num_draft_tokens >= least, "the proposer rarely drafted: the test would prove little"
    if row.method == "hybrid":  # the sources alternate: each drafted often
        assert len(sampled.sources) == 2 and min(sampled.sources.values()) > row.samples // 4, sampled.sources
    elif row.method == "ngram_draft":  # γ = auto chose each source somewhere
        assert {"ngram", "draft_model"} <= set(sampled.sources), sampled.sources
    elif controller is not None:  # the controller really varied γ, plain steps included
        assert controller.used.get(0, 0) >= 50 and sum(n >= 50 for k, n in controller.used.items() if k) >= 2, \
            controller.used
    if row.method in ("draft_model", "point-mass", "eagle3", "medusa") and row.siblings == 1:
        assert 0 < metrics.num_accepted_tokens < metrics.num_draft_tokens
    pvalue = pvalue_of(m.target, params, row.length)(sampled.counts, row.samples)
    assert pvalue > ALPHA, f"{row}: chi-square p = {pvalue:.2e}"


@pytest.mark.parametrize("model", ["table", "llama", "bf16"])
def test_the_check_has_power(models, model):
    m = models(model)
    params = SamplingParams(temperature=0.6)
    case = Case(m.target, lambda lane: WrongQ(m.draft.lane(), 2), shadow=m.shadow)
    caught, where = power.planted_bug_caught(case, PROMPT, params, SAMPLES, LENGTH, pvalue_of(m.target, params, LENGTH),
                                             ALPHA)
    assert caught, f"{model}: WrongQ not caught: chi-square {where}"
