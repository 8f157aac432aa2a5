"""The numpy sampler for point-mass steps (specchat/engine/host_sampling.py) against the
torch one it stands in for: the same support and probabilities as ``warp``, the same id
as ``sample_at`` for the same uniform, and the same refusal of non-finite logits. Its law
is read off exactly in test_exactness_steps.py (check_host_law), and seeded replies of
both samplers are compared there token for token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specchat.engine.host_sampling import FIRST_SHARE, support, verify_point_mass
from specchat.engine.sampling import SamplingParams, sample_at, warp

VOCAB = 49_152  # SmolLM2's

PARAMS = [
    SamplingParams(temperature=0.6, top_p=0.9),  # the default profile's
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=40),
    SamplingParams(temperature=1.3, top_k=50, top_p=0.95),
    SamplingParams(temperature=0.8, top_p=0.5),
    SamplingParams(temperature=0.0),
]


def chat_like(seed: int, rows: int = 3, vocab: int = VOCAB, dtype=torch.float32) -> torch.Tensor:
    """Logits shaped like a chat model's: a few likely ids standing out of a broad floor."""
    gen = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(rows, vocab, generator=gen)
    hot = torch.randint(vocab, (rows, 12), generator=gen)
    logits.scatter_(1, hot, 9.0 + 3.0 * torch.randn(rows, 12, generator=gen))
    return logits.to(dtype)


def dense(rows, vocab: int, dtype=np.float64) -> np.ndarray:
    out = np.zeros((len(rows), vocab), dtype=dtype)
    for i, (ids, probs) in enumerate(rows):
        out[i, ids] = probs
    return out


def assert_support_is_warps(logits: torch.Tensor, params: SamplingParams) -> None:
    p = warp(logits, params).numpy()
    rows = support(logits.numpy(), params)
    for i, (ids, probs) in enumerate(rows):
        assert np.all(np.diff(ids) > 0), "support ids must ascend"
        assert ids.tolist() == np.flatnonzero(p[i]).tolist(), f"row {i}: support differs from warp's"
        np.testing.assert_allclose(probs, p[i, ids], rtol=2e-5 if logits.dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("params", PARAMS, ids=repr)
@pytest.mark.parametrize("seed", range(3))
def test_support_and_probabilities_are_warps_on_a_real_vocabulary(params, seed):
    assert_support_is_warps(chat_like(seed), params)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_flat_distribution_widens_the_nucleus_search(dtype):
    """No id holds FIRST_SHARE of the mass: the nucleus spans thousands of ids."""
    gen = torch.Generator().manual_seed(7)
    logits = (0.3 * torch.randn(2, VOCAB, generator=gen)).to(dtype)
    params = SamplingParams(temperature=1.0, top_p=0.9)
    assert float(warp(logits, params).max()) < FIRST_SHARE
    assert_support_is_warps(logits, params)
    assert len(support(logits.numpy(), params)[0][0]) > 10_000


def test_ties_at_the_cuts_are_kept_as_warp_keeps_them():
    """Values equal to the k-th largest, or to the nucleus threshold θ, stay."""
    logits = torch.full((2, 300), -4.0)
    logits[0, [3, 50, 120, 200, 250]] = torch.tensor([5.0, 4.0, 4.0, 4.0, 1.0])  # top-2 ties the 2nd
    logits[1, [10, 20, 30]] = 3.0  # three equal ids: a nucleus of 0.5 ends inside the tie
    assert_support_is_warps(logits, SamplingParams(temperature=1.0, top_k=2))
    assert_support_is_warps(logits, SamplingParams(temperature=1.0, top_p=0.5))
    rows = support(logits.numpy(), SamplingParams(temperature=1.0, top_k=2))
    assert rows[0][0].tolist() == [3, 50, 120, 200]
    assert support(logits.numpy(), SamplingParams(temperature=1.0, top_p=0.5))[1][0].tolist() == [10, 20, 30]


def test_greedy_is_the_argmax_with_ties_to_the_lowest_id():
    logits = torch.tensor([[0.0, 2.0, 2.0, 1.0], [3.0, -1.0, 3.0, 3.0]])
    rows = support(logits.numpy(), SamplingParams(temperature=0.0))
    assert [ids.tolist() for ids, _ in rows] == [[1], [0]]
    verdict = verify_point_mass(logits.numpy(), [2], SamplingParams(temperature=0.0), [0.9, 0.1])
    assert verdict.next_tokens == [1, 0] and verdict.accepted == [False] and verdict.p_draft == [0.0]


@pytest.mark.parametrize("params", PARAMS[:5], ids=repr)
def test_the_draw_is_the_inverse_cdf_over_the_whole_vocabulary(params):
    """The id drawn over the support equals sample_at's over the whole vocabulary with the
    same probabilities and uniform: ids of zero mass add nothing to the running sum."""
    logits = chat_like(11, rows=1)
    uniforms = [(j + 0.5) / 997 for j in range(997)] + [0.0, 1.0 - 2**-53]
    full = torch.from_numpy(dense(support(logits.numpy(), params), VOCAB))
    for u in uniforms:
        host = verify_point_mass(logits.numpy(), [], params, [u]).next_tokens[0]
        assert host == int(sample_at(full, torch.tensor([u], dtype=torch.float64))), f"u = {u}"


def test_a_row_that_is_no_distribution_is_refused():
    params = SamplingParams(temperature=0.6, top_p=0.9)
    for bad in (float("nan"), float("inf")):
        logits = chat_like(3, rows=2).numpy()
        logits[1, 77] = bad
        assert verify_point_mass(logits, [5], params, [0.5, 0.5]).nonfinite
    logits = chat_like(3, rows=2).numpy()
    logits[0, :] = -np.inf
    assert verify_point_mass(logits, [5], params, [0.5, 0.5]).nonfinite
    assert not verify_point_mass(chat_like(3, rows=2).numpy(), [5], params, [0.5, 0.5]).nonfinite


def test_top_k_among_the_ids_near_the_top_is_the_whole_row_s_rule():
    """top_k looks for the k largest scaled logits among the ids near the row's largest; on
    rows with ties at the k-th, −inf entries and near sets too small it keeps exactly the ids
    the whole row's division and partition keep, and the same scaled values."""
    from specchat.engine.host_sampling import top_k

    rng = np.random.default_rng(0)
    for trial in range(600):
        row = (rng.standard_normal(3000) * rng.uniform(0.1, 20)).astype(np.float32 if trial % 2 else np.float64)
        if trial % 3 == 0:
            row[rng.integers(0, len(row), 40)] = row.max()
        if trial % 5 == 0:
            row[rng.integers(0, len(row), 30)] = -np.inf
        temperature, k = float(rng.uniform(0.05, 2.0)), int(rng.integers(1, 60))
        ids, scaled = top_k(row, row.max(), k, temperature)
        whole = row / temperature
        expected = np.flatnonzero(whole >= np.partition(whole, len(whole) - k)[len(whole) - k])
        assert np.array_equal(ids, expected) and np.array_equal(scaled, whole[expected])


def test_an_id_below_the_cut_that_scales_to_the_k_th_value_is_kept():
    # 0 is the cut (4 below the top); −1e-44 lies below it, yet divided by 1e6 both are 0:
    # a tie with the k-th scaled value, which the whole row's rule keeps
    from specchat.engine.host_sampling import top_k

    row = np.array([4.0, 0.0, -1e-44], dtype=np.float32)
    ids, _ = top_k(row, 4.0, 2, 1e6)
    assert ids.tolist() == [0, 1, 2]
