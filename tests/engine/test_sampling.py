"""The one-step rejection sampler and the logit warpers, against closed forms."""

import pytest
import torch
from scipy import stats

from specchat.engine.sampling import (
    SamplingParams,
    keep_at_least_,
    position_uniforms,
    rejection_sample,
    residual_distribution,
    sample_at,
    topk,
    warp,
)

V = 12


def random_dist(gen: torch.Generator, zeros: int = 0) -> torch.Tensor:
    """A random distribution over V ids with ``zeros`` ids of probability exactly 0."""
    x = torch.rand(V, generator=gen, dtype=torch.float64) ** 3
    if zeros:
        x[torch.randperm(V, generator=gen)[:zeros]] = 0.0
    return x / x.sum()


def closed_form_output(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the first emitted token for one draft x ~ q:
    P(y) = q(y)·min(1, p(y)/q(y)) + Σ_x q(x)(1 − min(1, p(x)/q(x)))·residual(y),
    built from the sampler's own residual."""
    accept = torch.where(q > 0, torch.clamp(p / q.clamp_min(1e-300), max=1.0), torch.zeros_like(q))
    residual = residual_distribution(p[None], q[None])[0]
    return q * accept + (q * (1 - accept)).sum() * residual


@pytest.mark.parametrize("case", range(200))
def test_one_step_output_is_p_in_closed_form(case):
    """The law of rejection_sample's first emitted token, read off the function itself
    with stratified uniforms (exact up to the grid's 1/n: no false alarms), is p — and
    it is the closed form built from the residual. Resampling from p, an inverted ratio
    or a wrong residual fails here."""
    from tests.engine.test_exactness_steps import first_token_and_bonus_law

    gen = torch.Generator().manual_seed(case)
    # q with zeros where p is not, and p with zeros where q is not
    p = random_dist(gen, zeros=case % 4)
    q = random_dist(gen, zeros=(case // 4) % 4)
    if case % 17 == 0:
        q = p.clone()  # p == q: never rejects
    grid = 2048
    law, _ = first_token_and_bonus_law(torch.stack([p, p]), q[None], grid=grid, bonus_too=False)
    assert torch.allclose(law, p, atol=3.0 / grid), (law, p)
    assert torch.allclose(closed_form_output(p, q), p, atol=1e-12)


def test_one_step_sampler_matches_p_statistically():
    """The whole sampler (draft ~ q, accept/reject, resample/bonus) drawn 20,000 times.
    Chi-square at a false-alarm rate of 1e-4 (seeded, so the run is deterministic)."""
    gen = torch.Generator().manual_seed(0)
    p0, p1 = random_dist(gen, zeros=2), random_dist(gen)
    q = random_dist(gen, zeros=3)
    p = torch.stack([p0, p1])
    n = 20_000
    drafts = torch.multinomial(q, n, replacement=True, generator=gen)
    counts = torch.zeros(V)
    for d in drafts.tolist():
        v = rejection_sample(p, q[None], torch.tensor([d]), gen)
        first = d if bool(v.accepted[0]) else int(v.next_tokens[0])
        counts[first] += 1
    expected = p0 * n
    keep = expected > 0
    assert counts[~keep].sum() == 0, "emitted a token the target gives probability 0"
    chi2 = stats.chisquare(counts[keep].numpy(), expected[keep].numpy())
    assert chi2.pvalue > 1e-4, chi2


def test_point_mass_drafts_accept_with_p_and_resample_without_the_draft():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    res = residual_distribution(p[:1], torch.nn.functional.one_hot(torch.tensor([0]), 4).double())
    assert torch.allclose(res[0], torch.tensor([0.0, 0.6, 0.4, 0.0], dtype=torch.float64))
    gen = torch.Generator().manual_seed(1)
    accepted = sum(bool(rejection_sample(p, None, torch.tensor([0]), gen).accepted[0]) for _ in range(4000))
    assert abs(accepted / 4000 - 0.5) < 0.04
    # a draft the target gives probability 0 is always rejected
    assert not any(bool(rejection_sample(p, None, torch.tensor([3]), gen).accepted[0]) for _ in range(200))


@pytest.mark.parametrize(
    "p_rows, drafts, expect_accepted",
    [
        # greedy: one-hot p; drafts kept while they equal the argmax
        ([[0, 1, 0], [1, 0, 0], [0, 0, 1]], [1, 0], [True, True]),
        ([[0, 1, 0], [1, 0, 0], [0, 0, 1]], [1, 2], [True, False]),
        ([[0, 1, 0], [1, 0, 0], [0, 0, 1]], [0, 0], [False, True]),
    ],
)
def test_greedy_table(p_rows, drafts, expect_accepted):
    p = torch.tensor(p_rows, dtype=torch.float64)
    q = torch.nn.functional.one_hot(torch.tensor(drafts), 3).double()
    v = rejection_sample(p, q, torch.tensor(drafts), torch.Generator().manual_seed(0))
    assert v.accepted.tolist() == expect_accepted
    # wherever a rejection happens, the replacement is the target's argmax
    for i, ok in enumerate(expect_accepted):
        if not ok:
            assert int(v.next_tokens[i]) == int(p[i].argmax())
    assert int(v.next_tokens[-1]) == int(p[-1].argmax())


def test_seeded_sampler_is_deterministic():
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(4, V, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(3, V, dtype=torch.float64), -1)
    d = torch.tensor([1, 2, 3])
    a, b = rejection_sample(p, q, d, gen_a), rejection_sample(p, q, d, gen_b)
    assert a.accepted.tolist() == b.accepted.tolist() and a.next_tokens.tolist() == b.next_tokens.tolist()


def hf_reference(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """transformers' own warpers, the reference for what plain sampling means."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    x = TemperatureLogitsWarper(params.temperature)(None, logits)
    if params.top_k:
        x = TopKLogitsWarper(params.top_k)(None, x)
    if params.top_p < 1:
        x = TopPLogitsWarper(params.top_p)(None, x)
    return x.softmax(-1)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.6, top_k=4),
        SamplingParams(temperature=1.3, top_p=0.7),
        SamplingParams(temperature=0.8, top_k=6, top_p=0.9),
        SamplingParams(temperature=1.0, top_p=0.05),  # keeps only the argmax
    ],
)
def test_warp_matches_transformers_warpers(params):
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.allclose(warp(logits, params), hf_reference(logits, params), atol=1e-12)


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.6, top_p=0.9),
                                    SamplingParams(temperature=0.8, top_k=40, top_p=0.95)])
def test_warp_matches_transformers_warpers_on_a_real_vocabulary(params):
    """A 49k vocabulary, float32 as models return it: the blocked top-k and the per-row
    cut are the paths the engine takes at this size (a 40-id vocabulary never takes them)."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 49_155, generator=gen) * 3  # not a multiple of the block size
    logits[2, 7:900] = logits[2, 5]  # a wide tie that top-k and top-p both cut through
    ours, theirs = warp(logits, params), hf_reference(logits, params)
    assert torch.equal(ours > 0, theirs > 0)  # the same tokens kept
    assert torch.allclose(ours, theirs, atol=1e-6)


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.6, top_p=0.9), SamplingParams(top_k=5)])
def test_warp_works_on_logits_that_require_grad(params):
    """verify and tests call warp on a model's output outside inference mode: the cuts work
    in place on warp's own tensors, which autograd must allow."""
    logits = torch.randn(3, 500, generator=torch.Generator().manual_seed(0)).requires_grad_()
    assert torch.allclose(warp(logits, params), warp(logits.detach(), params))


@pytest.mark.parametrize("vocab", [7, 300, 4096, 49_152, 49_155])
def test_blocked_topk_gives_torch_topk_values(vocab):
    gen = torch.Generator().manual_seed(vocab)
    x = torch.randint(-50, 50, (5, vocab), generator=gen).float()  # many ties
    x[1] = float("-inf")
    x[1, vocab // 2] = 3.0
    x[3, -1] = 1e9  # the maximum in the padded last block
    for k in (1, 5, 16):
        k = min(k, vocab)
        ours, theirs = topk(x, k), torch.topk(x, k)
        assert torch.equal(ours.values, theirs.values)
        finite = ours.values > float("-inf")  # padding ids only ever stand for −inf
        assert torch.equal(x.gather(1, ours.indices.clamp(max=vocab - 1))[finite], ours.values[finite])


@pytest.mark.parametrize("rows", [3, 20])  # per-row cut on the CPU; broadcast compare past 16 rows
def test_keep_at_least_keeps_values_equal_to_the_threshold(rows):
    gen = torch.Generator().manual_seed(rows)
    x = torch.rand(rows, 1000, generator=gen)
    threshold = x[:, 10:11].clone()
    x[:, 500] = threshold[:, 0]  # a tie with the threshold: kept
    x[:, 501] = torch.nextafter(threshold[:, 0], torch.zeros(rows))  # one float below: dropped
    kept = keep_at_least_(x.clone(), threshold, 0.0)
    assert torch.equal(kept, x.masked_fill(x < threshold, 0.0))
    assert (kept[:, 500] > 0).all() and (kept[:, 501] == 0).all()


def test_greedy_warp_is_one_hot_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 3.0, 0.0]])
    p = warp(logits, SamplingParams(temperature=0))
    assert p.tolist() == [[0, 1, 0], [1, 0, 0]]  # ties go to the lowest id, like torch.argmax


def _stratified(n: int) -> torch.Tensor:
    """n uniforms at the midpoints of n equal cells: frequencies computed from them are
    exact up to 1/n, with no sampling noise."""
    return (torch.arange(n, dtype=torch.float64) + 0.5) / n


def test_sample_at_is_the_inverse_cdf_and_never_draws_zero_mass():
    p = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3, 0.0], dtype=torch.float64)
    n = 10_000
    ids = sample_at(p.repeat(n, 1), _stratified(n))
    freq = torch.bincount(ids, minlength=6).double() / n
    assert torch.allclose(freq, p, atol=1.5 / n), freq
    # the extremes of [0, 1) land on ids with mass
    ends = sample_at(p.repeat(2, 1), torch.tensor([0.0, 1 - 2.0**-53], dtype=torch.float64)).tolist()
    assert ends == [1, 4]


def test_position_uniforms_depend_only_on_seed_and_position():
    whole = position_uniforms(42, 10, 6)
    assert position_uniforms(42, 10, 2) + position_uniforms(42, 12, 4) == whole  # grouping is irrelevant
    assert all(0.0 <= u < 1.0 for u in whole)
    assert position_uniforms(43, 10, 6) != whole and position_uniforms(42, 11, 6)[:5] == whole[1:]
    many = position_uniforms(7, 0, 20_000)
    assert stats.kstest(many, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("draft", [0, 1, 3])
def test_coupled_point_mass_rule_has_the_textbook_law(draft):
    """Point-mass drafts with per-position uniforms: over a stratified grid of uniforms the
    draft is kept with frequency p(x) and, after a rejection, the emitted token follows
    norm(max(p − one_hot(x), 0)) — exactly, up to the grid's 1/n."""
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    n = 20_000
    kept, emitted = 0, torch.zeros(4, dtype=torch.float64)
    for u in _stratified(n).tolist():
        v = rejection_sample(p, None, torch.tensor([draft]), None, uniforms=torch.tensor([u, 0.5]))
        if bool(v.accepted[0]):
            kept += 1
        else:
            emitted[int(v.next_tokens[0])] += 1
        assert float(v.alpha_terms[0]) == float(p[0, draft])
    assert abs(kept / n - float(p[0, draft])) < 1.5 / n
    residual = residual_distribution(p[:1], torch.nn.functional.one_hot(torch.tensor([draft]), 4).double())[0]
    if n - kept:
        assert torch.allclose(emitted / (n - kept), residual, atol=2.0 / (n - kept))


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-36, 1e-34])
def test_a_temperature_too_cold_for_floats_is_greedy(temperature):
    """logits / T leaves float range for a subnormal or tiny T (a client's 1e-320): the
    sampler found no token (IndexError, which failed every request on serve). Such a T is
    greedy, plain and speculative, float32 and float64. Planted bug: ``greedy`` is ``T <= 0``."""
    from specchat.engine import NgramProposer, SpeculativeEngine
    from tests.support.table_lm import TableLM, random_table

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 30
    assert torch.equal(warp(logits, SamplingParams(temperature=temperature)), warp(logits, SamplingParams(0.0)))
    target = TableLM(random_table(0))
    for proposer in (None, NgramProposer(3, 1, 3, 4)):
        def reply(t):
            target.reset()
            engine = SpeculativeEngine(target, proposer)
            return [x.id for s in engine.generate([1, 2, 3, 1, 2], SamplingParams(temperature=t), 24) for x in s.tokens]
        assert reply(temperature) == reply(0.0)
