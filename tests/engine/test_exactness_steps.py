"""Exactness with power: whole samples of several drafting steps, and checks that read
the sampler's law exactly.

* ``check_sampler_law``: rejection_sample itself, driven by stratified uniforms instead
  of a generator, gives the first emitted token's law (accept / resample) and the bonus
  token's law exactly up to the grid's 1/n — no sampling noise, so no false alarms — and
  they must equal p. Under every sampling setting (p and q warped alike).
* ``check_host_law``: the same for the numpy sampler point-mass steps use where the
  logits are in host memory (host_sampling.py): its draw's law at every position, p of
  the drafts and the alternatives are warp's p.
* ``check_draft_q``: the q a draft model reports is the law its drafts come from (it
  must be, for min(1, p/q) to be the right acceptance), also with a draft vocabulary
  smaller or larger than the target's.
* ``check_steps_joint``: 5-token samples with a draft (or point-mass drafts) at every
  step, γ = 2, so each sample holds two or three drafting steps; tested against the
  target's exactly enumerated joint by a chi-square that pools rare cells per prefix
  only (power.tree_chi_square), on a table model (tests/support/table_lm.py) fast enough for
  2,000 samples a setting.
* ``check_steps_joint_real``: the same on the tiny float64 Llama with a real KV cache,
  so the rollback of rejected drafts between drafting steps is under test.
* ``check_greedy_equal`` / ``check_coupled_equal``: greedy speculative == greedy plain, and
  seeded n-gram speculation == seeded plain sampling (the coupled form) over 60 tokens:
  deterministic equalities, no false alarms.
* ``check_host_equals_device``: seeded plain and n-gram replies are the same whether the
  numpy sampler or the torch one verifies them (a seed fixes the reply on every device).

False-alarm rates: each chi-square test rejects an exact sampler with probability
ALPHA = 1e-3 (they are seeded, so a run is deterministic); the exact-law and equality
checks never reject an exact sampler (their tolerance is the grid's resolution, or none).
test_mutations.py plants the bugs these checks exist for and shows each is caught.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from specchat.engine import DraftModelProposer, NgramProposer, Proposal, SamplingParams
import specchat.engine.engine as engine_module
import specchat.engine.host_sampling as host_sampling  # looked up at call time, as sampling below
from specchat.engine.proposers import Proposer
from specchat.engine.sampling import warp
import specchat.engine.sampling as sampling  # looked up at call time: test_mutations plants bugs there
from tests.support.folded import FoldedEngine
from tests.support.batched import Case
from tests.support.power import ALL_SETTINGS, GREEDY, SETTINGS, EveryStep, sample_counts, tree_chi_square
from tests.support.table_lm import VOCAB, TableLM, next_laws, noisy, random_table
from tests.support.vocab16 import Real, laws_of

ALPHA = 1e-3
GRID = 4096  # stratified uniforms per draft id: laws exact to ~1/GRID
PROMPT = [1, 2]
LENGTH = 5
SAMPLES = 1500


# --- the sampler's law, exactly ---------------------------------------------------------

def _stratified(n: int) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.float64) + 0.5) / n


def first_token_and_bonus_law(p: torch.Tensor, q: torch.Tensor | None, grid: int = GRID, bonus_too: bool = True):
    """The law of rejection_sample's first emitted token for one draft x ~ q (q None: the
    coupled point-mass form, x any id with p > 0 weighted by a draft law of p itself) and
    the law of the bonus after an accepted draft, read off the function.

    p: [2, V]. Every draft id is a row of one batched call (rows are independent
    positions), each with a grid of acceptance and next-token uniforms; acceptance and the
    next-token draw use independent uniforms in the sampler, so their laws are read apart
    and combined: P(y) = Σ_x q(x) [acc(x) 1{y = x} + (1 − acc(x)) next_x(y)]."""
    vocab = p.shape[-1]
    weights = q[0] if q is not None else p[0]
    xs = [x for x in range(vocab) if weights[x] > 0]
    u = _stratified(grid)
    drafts = torch.tensor(xs).repeat_interleave(grid)  # [m]
    m = drafts.numel()
    rows = torch.cat([p[:1].expand(m, vocab), p[1:]])  # [m+1, V]: the last row is the bonus position
    if q is None:
        verdict = sampling.rejection_sample(rows, None, drafts, None, uniforms=torch.cat([u.repeat(len(xs)), u[:1]]))
    else:
        verdict = sampling.rejection_sample(rows, q[:1].expand(m, vocab), drafts, None,
                                   draws=(u.repeat(len(xs)), torch.cat([u.flip(0).repeat(len(xs)), u[:1]])))
    accepted = verdict.accepted.view(len(xs), grid).double().mean(-1)  # [len(xs)]
    nxt = verdict.next_tokens[:m].view(len(xs), grid)
    law = torch.zeros(vocab, dtype=torch.float64)
    for i, x in enumerate(xs):
        after_reject = torch.bincount(nxt[i], minlength=vocab).double() / grid
        if q is None:  # coupled: next_tokens is the target's own draw, kept or not
            after_reject = after_reject.clone()
            after_reject[x] = 0.0
            after_reject = after_reject / after_reject.sum() if after_reject.sum() > 0 else after_reject
        law += weights[x] * (accepted[i] * torch.nn.functional.one_hot(torch.tensor(x), vocab) +
                             (1 - accepted[i]) * after_reject)
    if not bonus_too:
        return law, None
    # the bonus: k = 1 calls whose draft is always kept, one per grid point
    keep = int(p[0].argmax())
    bonus = torch.zeros(vocab, dtype=torch.float64)
    q_keep = torch.nn.functional.one_hot(torch.tensor([keep]), vocab).double() if q is not None else None
    draft = torch.tensor([keep])
    for j in range(0, grid, 8):
        if q is None:  # coupled: the token at the bonus position is drawn whatever the verdict
            v = sampling.rejection_sample(p, None, draft, None, uniforms=torch.tensor([0.5, float(u[j])]))
        else:  # u = 0 keeps the draft (p > 0 at the argmax)
            v = sampling.rejection_sample(p, q_keep, draft, None,
                                          draws=(torch.zeros(1, dtype=torch.float64), torch.tensor([0.5, float(u[j])])))
        bonus[int(v.next_tokens[1])] += 8.0 / grid
    return law, bonus


def setting_distributions(params: SamplingParams, seed: int = 0):
    """p [2, V] and q [1, V] warped from fixed random logits (q: a perturbed draft's)."""
    gen = torch.Generator().manual_seed(seed)
    target = 2.0 * torch.randn(2, VOCAB, generator=gen, dtype=torch.float64)
    draft = target[:1] + 1.5 * torch.randn(1, VOCAB, generator=gen, dtype=torch.float64)
    return warp(target, params), warp(draft, params)


def check_sampler_law(setting: str) -> None:
    params = ALL_SETTINGS[setting]
    p, q = setting_distributions(params)
    for name, qq in (("draft q", q), ("point mass (coupled)", None)):
        law, bonus = first_token_and_bonus_law(p, qq)
        assert torch.allclose(law, p[0], atol=4.0 / GRID), f"{setting}, {name}: first token {law} vs p {p[0]}"
        if not params.greedy or qq is not None:
            assert torch.allclose(bonus, p[1], atol=16.0 / GRID), f"{setting}, {name}: bonus {bonus} vs p {p[1]}"


def check_host_law(setting: str, seed: int = 0) -> None:
    """host_sampling.verify_point_mass, driven by a stratified grid of uniforms: the law of
    the token drawn at each position is warp's p exactly (to the grid's 1/n); p of each
    draft, p of the token drawn and the alternatives are read off p as well."""
    params = ALL_SETTINGS[setting]
    gen = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(3, VOCAB, generator=gen, dtype=torch.float64)
    p = warp(logits, params)
    drafts = [int(p[0].argmax()), int(p[1].argmin())]  # a likely one and (when filtered) an impossible one
    u = _stratified(GRID).tolist()
    laws = torch.zeros(3, VOCAB, dtype=torch.float64)
    for x in u:
        verdict = host_sampling.verify_point_mass(logits.numpy(), drafts, params, [x, x, x])
        for i, y in enumerate(verdict.next_tokens):
            laws[i, y] += 1.0 / GRID
            assert verdict.p_next[i] == pytest.approx(float(p[i, y]), rel=1e-9, abs=1e-12)
        assert verdict.accepted == [y == d for y, d in zip(verdict.next_tokens, drafts)]
    assert torch.allclose(laws, p, atol=2.0 / GRID), f"{setting}: host draws {laws} vs p {p}"
    assert verdict.p_draft == pytest.approx([float(p[0, drafts[0]]), float(p[1, drafts[1]])], rel=1e-9, abs=1e-12)
    for i, row in enumerate(verdict.alternatives):
        top = torch.topk(p[i], min(5, VOCAB)).values.tolist()
        assert [b for _, b in row] == pytest.approx([b for b in top if b > 0][:len(row)], rel=1e-9, abs=1e-12)
        assert all(b == pytest.approx(float(p[i, a]), rel=1e-9, abs=1e-12) for a, b in row)


@pytest.mark.parametrize("setting", list(ALL_SETTINGS))
def test_host_sampler_law_is_p_exactly(setting):
    check_host_law(setting)


@pytest.mark.parametrize("setting", list(ALL_SETTINGS))
def test_rejection_sample_law_is_p_exactly(setting):
    check_sampler_law(setting)


# --- the draft's reported q is its law --------------------------------------------------

def table_pair(draft_width: int = VOCAB, noise: float = 1.5):
    target = random_table(0)
    return target, noisy(target, 1, noise, width=draft_width)


def check_draft_q(setting: str, draft_width: int, samples: int = 3000) -> None:
    """Chi-square (false-alarm rate ALPHA) of ``samples`` first drafts against the q the
    proposer reports with them, on the target's vocabulary."""
    params = ALL_SETTINGS[setting]
    _, draft_table = table_pair(draft_width)
    proposer = DraftModelProposer(TableLM(draft_table), 1)
    proposer.vocab_size = VOCAB
    generator = torch.Generator().manual_seed(11)
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    reported = None
    for _ in range(samples):
        proposal = proposer.propose(PROMPT, 1, params, generator)
        assert proposal.q.shape == (1, VOCAB)
        reported = proposal.q[0]
        counts[int(proposal.tokens[0])] += 1
    expected = reported * samples
    assert counts[expected == 0].sum() == 0, f"drafted ids its reported q gives probability 0: {counts}"
    keep = expected > 0
    if int(keep.sum()) > 1:
        pvalue = stats.chisquare(counts[keep].numpy(), expected[keep].numpy()).pvalue
        assert pvalue > ALPHA, f"{setting}, draft vocabulary {draft_width}: χ² p = {pvalue:.2e}"


@pytest.mark.parametrize("draft_width", [12, VOCAB, 20])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_draft_q_is_the_law_of_its_drafts(setting, draft_width):
    check_draft_q(setting, draft_width)


# --- whole multi-step samples -------------------------------------------------------------

class PointMassDrafts(Proposer):
    """Point-mass drafts: the draft table's argmax continuation (deterministic given the
    past, so acceptance is frequent), verified in the coupled form."""

    kind = "ngram"

    def __init__(self, lm: TableLM, k: int) -> None:
        super().__init__(k)
        self.lm = lm

    def propose(self, ids, k, params, generator):
        seq = list(ids)
        for _ in range(k):
            seq.append(int(self.lm.logits_after(seq)[:VOCAB].argmax()))
        return Proposal(torch.tensor(seq[len(ids):]), None)


KINDS = {"draft": VOCAB, "draft-vocab12": 12, "draft-vocab20": 20, "point-mass": VOCAB}


def check_steps_joint(kind: str, setting: str, samples: int = SAMPLES) -> None:
    params = ALL_SETTINGS[setting]
    target_table, draft_table = table_pair(KINDS[kind])
    draft = TableLM(draft_table)
    proposer = ((lambda lane: PointMassDrafts(draft, 2)) if kind == "point-mass"
                else (lambda lane: DraftModelProposer(draft.lane(), 2)))
    sampled = sample_counts(Case(TableLM(target_table), proposer, lambda p: EveryStep(2)), PROMPT, params, samples,
                            LENGTH)
    metrics = sampled.metrics
    # several drafting steps per sample, with acceptances, rejections and bonus tokens
    assert metrics.num_drafts >= 2 * samples, metrics.num_drafts
    assert 0 < metrics.num_accepted_tokens < metrics.num_draft_tokens
    assert 0 < metrics.acceptance_histogram[-1] < metrics.num_drafts
    pvalue = tree_chi_square(sampled.counts, next_laws(TableLM(target_table), PROMPT, params))
    assert pvalue > ALPHA, f"{kind}/{setting}: χ² p = {pvalue:.2e}"


# a draft vocabulary larger than the target's only cuts rows off: two settings suffice
CASES = [(kind, setting) for kind in ("draft", "draft-vocab12", "point-mass") for setting in SETTINGS] + [
    ("draft-vocab20", "t1"), ("draft-vocab20", "t0.9-topk6-topp0.9")]


@pytest.mark.parametrize("kind, setting", CASES)
def test_multi_step_samples_have_the_targets_joint(kind, setting):
    check_steps_joint(kind, setting)


# --- with a real KV cache: the tiny float64 Llama -----------------------------------------

REAL_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]
REAL_LENGTH = 4
REAL_SAMPLES = 800


def check_steps_joint_real(target, draft, setting: str, samples: int = REAL_SAMPLES) -> None:
    """Every sequence's target on the transformers backend itself (its KV cache rolled back
    after each rejection), in one batch."""
    params = ALL_SETTINGS[setting]
    case = Case(Real(target), lambda lane: DraftModelProposer(laws_of(draft).lane(), 2), lambda p: EveryStep(2))
    sampled = sample_counts(case, REAL_PROMPT, params, samples, REAL_LENGTH)
    metrics = sampled.metrics
    assert metrics.num_drafts > samples and 0 < metrics.num_accepted_tokens < metrics.num_draft_tokens
    pvalue = tree_chi_square(sampled.counts, next_laws(laws_of(target), REAL_PROMPT, params))
    assert pvalue > ALPHA, f"real cache, {setting}: χ² p = {pvalue:.2e}"


@pytest.mark.parametrize("setting", ["t1", "t0.9-topk6-topp0.9"])
def test_multi_step_samples_with_a_real_cache(target, draft, setting):
    check_steps_joint_real(target, draft, setting)


GREEDY_PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2], [5], [7, 7, 7, 7], [0, 15, 3, 9, 0, 15, 3]]


def _ids(engine, prompt, params, n=60):
    return [t.id for s in engine.generate(prompt, params, max_new_tokens=n) for t in s.tokens]


def check_greedy_equal(target, draft, kind: str) -> None:
    plain = FoldedEngine(target, None, eos_token_ids=[])
    proposer = DraftModelProposer(draft, 3) if kind == "draft" else NgramProposer(3, 1, 3)
    engine = FoldedEngine(target, proposer, eos_token_ids=[])
    for prompt in GREEDY_PROMPTS:
        assert _ids(engine, prompt, GREEDY) == _ids(plain, prompt, GREEDY), f"greedy {kind} diverged on {prompt}"


def check_coupled_equal(target, setting: str) -> None:
    """Seeded n-gram speculation emits the seeded plain reply (the coupled form), with
    drafts kept and rejected along the way."""
    plain = FoldedEngine(target, None, eos_token_ids=[])
    engine = FoldedEngine(target, NgramProposer(3, 1, 3), eos_token_ids=[])
    for seed, prompt in enumerate(GREEDY_PROMPTS):
        params = SamplingParams(**{**ALL_SETTINGS[setting].__dict__, "seed": seed})
        assert _ids(engine, prompt, params) == _ids(plain, prompt, params), f"{setting}: n-gram diverged on {prompt}"
    assert engine.metrics.num_accepted_tokens > 0


@pytest.mark.parametrize("kind", ["draft", "ngram"])
def test_greedy_speculation_is_greedy_plain(target, draft, kind):
    check_greedy_equal(target, draft, kind)


@pytest.mark.parametrize("setting", list(ALL_SETTINGS))
def test_seeded_ngram_reply_is_the_plain_reply(target, setting):
    check_coupled_equal(target, setting)


def check_host_equals_device(target, setting: str) -> None:
    """Seeded plain and n-gram replies through the numpy sampler equal those through the
    torch sampler (engine.HOST_SAMPLING off), token for token."""
    for seed, prompt in enumerate(GREEDY_PROMPTS):
        params = SamplingParams(**{**ALL_SETTINGS[setting].__dict__, "seed": seed})
        for proposer in (None, NgramProposer(3, 1, 3)):
            replies = []
            for on_host in (True, False):
                engine_module.HOST_SAMPLING = on_host
                try:
                    engine = FoldedEngine(target, proposer, eos_token_ids=[])
                    replies.append(_ids(engine, prompt, params))
                finally:
                    engine_module.HOST_SAMPLING = True
            assert replies[0] == replies[1], f"{setting}: host and device samplers diverged on {prompt}"


@pytest.mark.parametrize("setting", list(ALL_SETTINGS))
def test_host_and_device_samplers_give_one_seeded_reply(target, setting):
    check_host_equals_device(target, setting)
