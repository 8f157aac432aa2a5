"""llama.cpp's attention op (ggml_flash_attn_ext) on the CPU build set-up installs, alone,
against a float64 NumPy reference: the kernel that runs is whichever this build takes for
a batch of that size — specchat's small-batch kernel (patches/llama.cpp/0002, AVX-512
or AVX2, 2–63 tokens, head sizes 64 and 128) where it is compiled, llama.cpp's own
elsewhere and for one token. A model's logits blur an attention bug with every other op and with rounding a
batch already has (tests/engine/backends/test_llamacpp_kernel.py compares whole models); here one op is
compared with the exact answer, at head sizes 64 and 128, several context lengths (inside
one of the kernel's 128-position ranges, across several, not a multiple of its 16-position
blocks) and batch sizes, SmolLM2's grouped heads (9 query heads over 3 KV heads) and a
causal mask, on two threads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.ggml_ops import Ggml, attention_reference
from tests.support.needs import llama_cpp, needs_llama_cpp

pytestmark = needs_llama_cpp

N_HEAD, N_HEAD_KV = 9, 3


@pytest.fixture(scope="module")
def ggml():
    return Ggml(Path(llama_cpp.__file__).parent / "lib")


def causal_mask(n_tokens: int, n_kv: int) -> np.ndarray:
    """The last n_tokens positions are the batch: token t sees positions up to its own."""
    mask = np.zeros((n_tokens, n_kv), dtype=np.float32)
    for t in range(n_tokens):
        mask[t, n_kv - n_tokens + t + 1:] = -np.inf
    return mask


def kv(rng, n_kv: int, d: int):
    k = rng.standard_normal((N_HEAD_KV, n_kv, d)).astype(np.float16)
    v = rng.standard_normal((N_HEAD_KV, n_kv, d)).astype(np.float16)
    return k, v


# the largest |error| a healthy build shows against float64, with V ~ N(0, 1):
# llama.cpp's own path rounds Q to F16 and accumulates V·softmax in F16 (measured
# 2026-12-02 on AVX2: at most 5.7e-3 over the cases below); specchat's small-batch kernel
# accumulates in F32 (at most 1.1e-6, same day, its AVX2 build). A one-position skip moves
# an output by ~|v|/n_kv (0.0025 at 1,000 positions for a typical |v| of 2.5): under the
# kernel's bound, this test catches it; under llama.cpp's, the aimed test below does.
LLAMA_CPP_TOLERANCE = 1e-2
KERNEL_TOLERANCE = 1e-4


def tolerance(n_tokens: int) -> float:
    from specchat.loading.llamacpp import small_batch_attention_width

    takes_kernel = n_tokens >= 2 and small_batch_attention_width(llama_cpp) > 0
    return KERNEL_TOLERANCE if takes_kernel else LLAMA_CPP_TOLERANCE


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n_kv", [9, 129, 300, 1000])
@pytest.mark.parametrize("n_tokens", [1, 2, 5, 8])
def test_attention_matches_a_float64_reference(ggml, d, n_kv, n_tokens):
    """Scores of spread ~1.5 logits (neither uniform nor one-hot). Planted bugs, shown once
    each in a scratch build of ggml-cpu (AVX2, 2026-12-02): in llama.cpp's own path, the
    softmax's running sum not rescaled when its maximum moves fails the cases by 0.18–1.7,
    and skipping position 144 fails 12 of them by 0.011–0.43; in specchat's kernel,
    leaving position 144's V out of the sum fails all 12 cases it runs with more than 144
    positions, by 0.007–0.44."""
    rng = np.random.default_rng([d, n_kv, n_tokens])
    k, v = kv(rng, n_kv, d)
    q = (rng.standard_normal((N_HEAD, n_tokens, d)) * 1.5).astype(np.float32)
    mask = causal_mask(n_tokens, n_kv)
    scale = 1.0 / np.sqrt(d)
    ours = ggml.flash_attn_ext(q, k, v, mask, scale)
    exact = attention_reference(q, k, v, mask, scale)
    err = np.abs(ours - exact).max()
    assert err < tolerance(n_tokens), f"attention is {err:.2e} from the float64 reference (D={d}, {n_kv} positions, {n_tokens} tokens)"


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n_kv", [300, 1000])
@pytest.mark.parametrize("n_tokens", [1, 5])
def test_every_kv_position_is_attended(ggml, d, n_kv, n_tokens):
    """Each query row is aimed at one position j of its KV head (q along K[j], a score ~20
    above the rest), so its output is V[j] to within 1e-2; the rows between them aim at
    every position 0 … n_kv − 1, first and last of each block and range included. A kernel
    that skips one position, anywhere, gives that row some other V: an error of order 1.
    Planted bugs, shown once in a scratch build of ggml-cpu (AVX2, 2026-12-02): skipping
    position 144 in llama.cpp's own path fails all 8 cases by 2.4–3.0; leaving its V out in
    specchat's kernel fails the 4 cases of 5 tokens (the kernel's) by 2.6–3.4."""
    rng = np.random.default_rng([d, n_kv, n_tokens, 1])
    k, v = kv(rng, n_kv, d)
    scale = 1.0 / np.sqrt(d)
    mask = np.zeros((n_tokens, n_kv), dtype=np.float32)  # every position visible
    rows = N_HEAD * n_tokens
    worst, where = 0.0, None
    for start in range(0, n_kv, rows):
        targets = [(start + r) % n_kv for r in range(rows)]
        q = np.empty((N_HEAD, n_tokens, d), dtype=np.float32)
        for r, j in enumerate(targets):
            h, t = r % N_HEAD, r // N_HEAD
            kj = k[h // (N_HEAD // N_HEAD_KV), j].astype(np.float32)
            q[h, t] = 20.0 / scale * kj / float(kj @ kj)
        ours = ggml.flash_attn_ext(q, k, v, mask, scale)
        exact = attention_reference(q, k, v, mask, scale)
        err = np.abs(ours - exact).max(axis=2)  # [tokens, heads]
        if err.max() > worst:
            t, h = np.unravel_index(err.argmax(), err.shape)
            worst, where = float(err.max()), targets[t * N_HEAD + h]
    assert worst < 1e-2, f"the row aimed at position {where} is {worst:.3f} from its V (D={d}, {n_kv} positions)"
