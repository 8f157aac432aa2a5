"""Tiny float64 Llama models over a 16-token vocabulary, whose output distributions can
be enumerated exactly. Built in milliseconds from a config; no tokenizer needed."""

from __future__ import annotations

import itertools

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specchat.engine.sampling import SamplingParams, warp

VOCAB = 16


def tiny_lm(seed: int, layers: int = 2, hidden: int = 16, max_positions: int = 128,
            eos: int | None = None, scale: float = 4.0) -> LlamaForCausalLM:
    """``scale`` sharpens the random output head so distributions are far from uniform."""
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                      eos_token_id=eos, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.float64).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.generation_config.eos_token_id = eos
    return model


@torch.inference_mode()
def exact_joint(model: LlamaForCausalLM, prompt: list[int], length: int, params: SamplingParams) -> dict[tuple, float]:
    """P(x_1..x_length | prompt) under plain sampling with ``params``, for every sequence."""
    prefixes = [()]
    probs = {(): 1.0}
    for _ in range(length):
        batch = torch.tensor([prompt + list(pre) for pre in prefixes])
        logits = model(input_ids=batch).logits[:, -1]  # [B, V]
        p = warp(logits, params)
        nxt = {}
        for row, pre in enumerate(prefixes):
            for tok, pt in enumerate(p[row].tolist()):
                if pt > 0:
                    nxt[pre + (tok,)] = probs[pre] * pt
        probs = nxt
        prefixes = list(probs)
    return probs


def all_sequences(length: int):
    return itertools.product(range(VOCAB), repeat=length)


def perturbed(model: LlamaForCausalLM, seed: int, noise: float = 0.3) -> LlamaForCausalLM:
    """A draft that agrees with ``model`` often but not always: its weights plus noise."""
    import copy

    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(noise * param.std() * torch.randn(param.shape, generator=gen, dtype=param.dtype))
    return draft
