"""bf16 linear layers packed for oneDNN on the CPU (specchat/loading/cpu_linear.py): the
same outputs bit for bit, every bf16 ``nn.Linear`` packed (a tied one as a copy), and nothing
touched where this torch build cannot pack."""

from __future__ import annotations

import pytest
import torch

from specchat.config.loader import load_profile
from specchat.loading.cpu_linear import PackedLinear, copied_bytes, pack_linears
import specchat.loading.cpu_linear as cpu_linear
from specchat.loading.models import load_models
from tests.support.tiny_models import write_tiny_profile


def cpu_can_pack_bf16() -> bool:
    """oneDNN packs bf16 weights only on CPUs with AVX-NE-CONVERT or AVX-512 BW+VL+DQ
    (it raises otherwise): read from the CPU's own feature list, not from the packed layer."""
    from specchat.loading.cpu_features import _read_flags

    flags = set((_read_flags()[0] or "").split())
    return "avx_ne_convert" in flags or {"avx512bw", "avx512vl", "avx512dq"} <= flags


# whether the build has the ops and the CPU the instructions (not packing_works(): a bug in
# the packed layer must fail these tests, not skip them)
needs_packing = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
         and cpu_can_pack_bf16()),
    reason="no oneDNN bf16 linear packing here (this torch build lacks it, or the CPU lacks AVX-512 BW/VL/DQ "
           "and AVX-NE-CONVERT)")


@needs_packing
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 96), (1, 6, 96), (37, 96), (2, 130, 96)])
def test_a_packed_layer_gives_the_layers_output_bit_for_bit(bias, shape):
    gen = torch.Generator().manual_seed(3)
    linear = torch.nn.Linear(96, 200, bias=bias, dtype=torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(200, 96, generator=gen))
        if bias:
            linear.bias.copy_(torch.randn(200, generator=gen))
    x = torch.randn(*shape, generator=gen).to(torch.bfloat16)
    packed = PackedLinear(linear)
    with torch.inference_mode():
        assert torch.equal(packed(x), linear(x))
    assert torch.equal(packed.weight, linear.weight) and packed.weight.dtype == torch.bfloat16


@needs_packing
def test_a_bf16_model_on_the_cpu_is_packed_and_decodes_the_same_logits(tmp_path, tiny_model_dir, tiny_draft_dir):
    path = write_tiny_profile(tmp_path / "bf16.toml", tiny_model_dir, tiny_draft_dir, dtype="bfloat16")
    loaded = load_models(load_profile(path))
    plain = load_models(load_profile(path)).target.model
    plain_lm = plain.lm_head
    target = loaded.target.model
    assert loaded.info["target"]["packed_linears"] == 2 * 7 + 1  # 2 layers × q k v o gate up down, lm_head
    assert "oneDNN-packed" in loaded.info["precision"]
    assert isinstance(target.model.layers[0].mlp.down_proj, PackedLinear)
    # the reference: the same weights unpacked
    for parent in list(plain.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, PackedLinear):
                linear = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                         dtype=torch.bfloat16)
                with torch.no_grad():
                    linear.weight.copy_(child.weight)
                setattr(parent, name, linear)
    assert plain_lm is not plain.lm_head
    ids = torch.tensor([[1, 5, 9, 2, 7, 3]])
    with torch.inference_mode():
        assert torch.equal(target(ids).logits, plain(ids).logits)


def test_float32_layers_are_left_alone():
    assert pack_linears(torch.nn.Sequential(torch.nn.Linear(8, 8))) == 0


@needs_packing
def test_a_tied_output_layer_gets_a_packed_copy_and_the_embedding_keeps_the_original():
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 50))
    model.to(torch.bfloat16)
    model[2].weight = model[0].weight  # tied, as SmolLM2's lm_head is its embedding matrix
    original = model[0].weight.detach().clone()
    ids = torch.tensor([[3, 1, 49, 7]])
    with torch.inference_mode():
        expected = model(ids)
    assert pack_linears(model) == 2
    assert isinstance(model[2], PackedLinear) and model[2].copies_shared_weight
    assert not model[1].copies_shared_weight
    assert torch.equal(model[0].weight, original)  # the embedding still looks up the plain matrix
    assert copied_bytes(model) == 50 * 16 * 2
    with torch.inference_mode():
        assert torch.equal(model(ids), expected)


def test_nothing_is_packed_where_the_build_cannot(monkeypatch):
    monkeypatch.setattr(cpu_linear, "packing_works", lambda dtype=torch.bfloat16: False)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, dtype=torch.bfloat16))
    assert pack_linears(model) == 0 and type(model[0]) is torch.nn.Linear


@pytest.mark.skipif(cpu_can_pack_bf16(), reason="this CPU packs bf16 weights (the tests above run)")
def test_a_cpu_without_the_instructions_packs_nothing_and_still_computes():
    """On an AVX2-only CPU oneDNN refuses to pack bf16 weights: the probe says so and every
    layer stays a plain nn.Linear, with the same output as before."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 50)).to(torch.bfloat16)
    x = torch.randn(2, 16).to(torch.bfloat16)
    with torch.inference_mode():
        expected = model(x)
    assert not cpu_linear.packing_works()
    assert pack_linears(model) == 0 and all(type(m) is torch.nn.Linear for m in model)
    with torch.inference_mode():
        assert torch.equal(model(x), expected)


@needs_packing
def test_inputs_that_require_grad_take_the_plain_path_and_get_gradients():
    """The packed op has no backward (and ran ~250× slower on such inputs), so a caller
    differentiating through the model gets F.linear on the unpacked weight."""
    linear = torch.nn.Linear(16, 8, dtype=torch.bfloat16)
    x = torch.randn(3, 16, dtype=torch.bfloat16, requires_grad=True)
    PackedLinear(linear)(x).float().sum().backward()
    expected = linear.weight.float().sum(0).to(torch.bfloat16).expand(3, 16)
    assert torch.allclose(x.grad.float(), expected.float(), atol=0.05)


def test_loaded_models_are_inference_only(tmp_path, tiny_model_dir, tiny_draft_dir):
    """No parameter asks for a gradient: a forward outside inference_mode (specchat verify's
    reference pass, a user's script) builds no autograd graph."""
    path = write_tiny_profile(tmp_path / "f32.toml", tiny_model_dir, tiny_draft_dir)
    loaded = load_models(load_profile(path))
    assert not any(p.requires_grad for model in (loaded.target.model, loaded.draft.model) for p in model.parameters())
