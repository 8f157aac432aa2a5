"""Tiny float64 Llama models over a 16-token vocabulary, whose output distributions can
be enumerated exactly. Built in milliseconds from a config; no tokenizer needed."""

from __future__ import annotations

import functools
import itertools

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specchat.engine.sampling import SamplingParams, warp
from tests.support.table_lm import ContextLM

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


class ModelLM(ContextLM):
    """A transformers causal LM behind tests/support/table_lm.py's ContextLM: the logits
    and hidden states after a context are one full forward's last position, memoised and
    shared by every lane. A batch's sequences share most contexts, so each is run once,
    and ``prefetch`` runs a step's new ones together (one forward per context length)."""

    name = "model-laws"
    supports_trees = provides_features = provides_final_hidden = True
    CHUNK = 4096  # contexts a forward

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model, self.config = model, model.config
        self.vocab_size = int(model.config.vocab_size)
        self.num_layers, self.hidden_size = int(model.config.num_hidden_layers), int(model.config.hidden_size)
        self._memo: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}  # context → (logits [V], states [L+1, H])

    @torch.inference_mode()
    def prefetch(self, contexts) -> None:
        by_length: dict[int, set[tuple[int, ...]]] = {}
        for context in contexts:
            if context not in self._memo:
                by_length.setdefault(len(context), set()).add(context)
        for group in by_length.values():
            group = list(group)
            for at in range(0, len(group), self.CHUNK):
                chunk = group[at:at + self.CHUNK]
                out = self.model(input_ids=torch.tensor(chunk), output_hidden_states=True)
                states = torch.stack([h[:, -1] for h in out.hidden_states], 1)  # [B, L+1, H]
                self._memo.update(zip(chunk, zip(out.logits[:, -1].clone(), states)))

    def _laws(self, context: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        key = tuple(context)
        if key not in self._memo:  # a draft asks one context at a time: its siblings come next
            self.prefetch([key] + [key[:-1] + (v,) for v in range(self.vocab_size)])
        return self._memo[key]

    def logits_after(self, context: list[int]) -> torch.Tensor:
        return self._laws(context)[0]

    def state(self, layer: int, context: list[int]) -> torch.Tensor:
        return self._laws(context)[1][layer]


@functools.lru_cache(maxsize=None)
def laws_of(model: LlamaForCausalLM) -> ModelLM:
    """The one ModelLM of ``model`` (its memo and exact laws kept for the session)."""
    return ModelLM(model)


class Real:
    """A batch's target on the transformers backend itself: each lane a backend of its own
    over ``model`` (its KV cache, rolled back after rejections), nothing shared."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        self.model = model

    def lane(self):
        from specchat.engine.backends.transformers import TransformersBackend

        return TransformersBackend(self.model)

    def prefetch(self, contexts) -> None:
        """Each lane runs its own."""
