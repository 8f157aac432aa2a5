"""The drafting form of an EAGLE-3 head (heads/drafter.py: fused products, a RoPE table,
a preallocated cache, one grouped-query attention call) computes what the plain ``step``
of tests/support/eagle3_reference.py computes — through a catch-up of several rows,
chained drafts, a rollback, positions the head never saw, and a cache that has to grow.
With int8 weights it stays close.
"""

from __future__ import annotations

import pytest
import torch

from specchat.heads.drafter import Drafter
from specchat.heads.eagle3 import Eagle3Config, Eagle3Head
from tests.support.eagle3_reference import HeadCache, step


def gqa_head(dtype=torch.float64) -> Eagle3Head:
    config = Eagle3Config(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=8, vocab_size=40, draft_vocab_size=24, target_hidden_size=32, layer_ids=(0, 1, 2))
    gen = torch.Generator().manual_seed(0)
    head = Eagle3Head(config, torch.randn(40, 32, generator=gen))
    with torch.no_grad():
        for param in head.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=gen) / param.shape[1] ** 0.5)
            else:
                param.copy_(1 + 0.1 * torch.randn(param.shape, generator=gen))
    return head.to(dtype).eval()


def run_both(head, drafter, cache, ref, tokens, g_fast, g_ref, positions):
    out = drafter.step(cache, torch.tensor(tokens), g_fast, positions)
    want = step(head, ref, torch.tensor(tokens), g_ref, positions)
    return out, want


@pytest.mark.parametrize("int8, tol", [(False, 1e-6), (True, 0.08)])
@torch.inference_mode()
def test_the_drafter_computes_what_the_head_steps_compute(int8, tol):
    """Float weights: equal up to rounding (eagle3's norms compute in float32)."""
    head = gqa_head()
    drafter = Drafter(head, int8=int8)
    cache, ref = drafter.new_cache(capacity=4), HeadCache()  # capacity 4: it must grow
    features = torch.randn(12, 96, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def close(a, b):
        scale = float(b.abs().max())
        assert float((a - b).abs().max()) <= tol * scale, (float((a - b).abs().max()), scale)

    # catch-up: 5 teacher-forced rows at once
    out, want = run_both(head, drafter, cache, ref, [3, 7, 1, 9, 2], drafter.fuse(features[:5]), head.fuse(features[:5]),
                         [0, 1, 2, 3, 4])
    close(out, want)
    close(drafter.fuse(features[:5]), head.fuse(features[:5]))
    # three chained drafts, each fed the previous pre-norm output
    g_fast, g_ref = out[-1:], want[-1:]
    for i, token in enumerate([5, 8, 11]):
        close(drafter.logits(g_fast), head.logits(g_ref))
        g_fast, g_ref = run_both(head, drafter, cache, ref, [token], g_fast, g_ref, [5 + i])
        close(g_fast, g_ref)
    # rollback to position 5, then the target's rows for 5 and 6, then 9 and 10 (7, 8 never seen)
    cache.truncate(5)
    ref.truncate(5)
    assert cache.end == ref.end == 5
    close(cache.tail, ref.tail)
    out, want = run_both(head, drafter, cache, ref, [4, 4], drafter.fuse(features[5:7]), head.fuse(features[5:7]), [5, 6])
    close(out, want)
    out, want = run_both(head, drafter, cache, ref, [6, 0], drafter.fuse(features[9:11]), head.fuse(features[9:11]), [9, 10])
    close(out, want)
    close(drafter.logits(cache.tail), head.logits(ref.tail))
    assert cache.positions == ref.positions == [0, 1, 2, 3, 4, 5, 6, 9, 10]


@torch.inference_mode()
def test_int8_weights_keep_the_heads_choices():
    """The quantised drafter's logits pick the same token as the float head's on almost
    every row (what drafts it makes; exactness is the verifier's)."""
    head = gqa_head(torch.float32)
    drafter = Drafter(head, int8=True)
    g = torch.randn(200, 32, generator=torch.Generator().manual_seed(2))
    agree = (drafter.logits(g).argmax(-1) == head.logits(g).argmax(-1)).float().mean()
    assert agree > 0.95, float(agree)
