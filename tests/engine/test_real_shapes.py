"""Tiny models of the shapes real pairs have, through the public engine API: draft
vocabularies smaller and larger than the target's (Qwen2.5-7B/0.5B pad differently),
Mistral-style sliding windows and Gemma-2-style interleaved windows past the window, a
cache that cannot roll back (LFM2's convolution state), NaN logits, a failing crop,
parameter validation and a draft on another device. Float64, so greedy equality is
exact (no near-ties to excuse)."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, Lfm2Config, Lfm2ForCausalLM, MistralConfig, MistralForCausalLM

from specchat.engine import DraftModelProposer, NgramProposer, SamplingParams, SpeculativeEngine
from specchat.engine.backends.transformers import TransformersBackend
import specchat.engine.engine as engine_module
from specchat.errors import GenerationError, SamplingError
from tests.support.vocab16 import VOCAB

GREEDY = SamplingParams(temperature=0)
SAMPLED = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=5, top_p=0.9)]
WINDOW = 8
NEW_TOKENS = 72  # 60+ past an 8-token window
PROMPT = [1, 2, 3, 4, 5]


def _sharpen(model, scale=8.0):
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model.double().eval()


def mistral(seed: int = 0):
    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
                        sliding_window=WINDOW, eos_token_id=None, bos_token_id=None, pad_token_id=None,
                        tie_word_embeddings=False)
    torch.manual_seed(seed)
    return _sharpen(MistralForCausalLM(cfg))


def gemma2(seed: int = 0):
    cfg = Gemma2Config(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
                       sliding_window=WINDOW, eos_token_id=None, bos_token_id=None, pad_token_id=None,
                       tie_word_embeddings=False, final_logit_softcapping=None)
    torch.manual_seed(seed)
    return _sharpen(Gemma2ForCausalLM(cfg))


def noisy_copy(model, noise: float, seed: int = 1, vocab: int | None = None):
    """A draft: the target's weights plus noise, its vocabulary cut or padded to ``vocab``."""
    draft = copy.deepcopy(model)
    if vocab is not None and vocab != VOCAB:
        draft.resize_token_embeddings(vocab, mean_resizing=False)
        draft.double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(noise * param.std() * torch.randn(param.shape, generator=gen, dtype=param.dtype))
    return draft


@torch.inference_mode()
def reference_greedy(model, prompt, n):
    """Greedy decoding without any cache: the whole sequence through the model each token."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def run(engine, prompt=PROMPT, params=GREEDY, n=NEW_TOKENS):
    steps = list(engine.generate(prompt, params, max_new_tokens=n))
    return [t.id for s in steps for t in s.tokens], steps


@pytest.fixture(scope="module")
def llama_pair():
    from tests.support.vocab16 import perturbed, tiny_lm

    target = tiny_lm(0, scale=12)
    return target, perturbed(target, seed=1, noise=0.4)


# --- padded vocabularies ---------------------------------------------------------------------

@pytest.mark.parametrize("draft_vocab", [12, 20])
def test_draft_vocabulary_smaller_or_larger_than_the_targets(llama_pair, draft_vocab):
    target, base = llama_pair
    draft = noisy_copy(base, 0.0, vocab=draft_vocab)
    assert draft.get_output_embeddings().weight.shape[0] == draft_vocab
    plain = SpeculativeEngine(target, None, eos_token_ids=[])
    engine = SpeculativeEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    expected, _ = run(plain)
    got, steps = run(engine)
    assert got == expected
    assert sum(s.stats.num_accepted_tokens for s in steps) > 0
    for seed in range(8):
        for params in SAMPLED:
            ids, steps = run(engine, params=SamplingParams(**{**params.__dict__, "seed": seed}), n=30)
            assert all(0 <= i < VOCAB for i in ids), ids
            for step in steps:
                for token in step.tokens:
                    assert token.rejected_id is None or token.rejected_id < VOCAB


# --- sliding windows -----------------------------------------------------------------------------

@pytest.mark.parametrize("family, noise", [("mistral", 0.3), ("gemma2", 0.05)])
def test_sliding_window_models_speculate_exactly_past_the_window(family, noise):
    target = mistral() if family == "mistral" else gemma2()
    draft = noisy_copy(target, noise)
    assert TransformersBackend(target).can_rollback
    expected = reference_greedy(target, PROMPT, NEW_TOKENS)
    assert run(SpeculativeEngine(target, None, eos_token_ids=[]))[0] == expected
    for proposer in (DraftModelProposer(draft, 3), NgramProposer(3, 1, 3)):
        engine = SpeculativeEngine(target, proposer, eos_token_ids=[])
        got, steps = run(engine)
        assert got == expected, f"{family} {proposer.kind} diverged from cache-free greedy"
        kinds = {t.kind for s in steps for t in s.tokens}
        assert {"accepted", "resampled"} <= kinds  # rollbacks happened past the window
        layer = next(layer for layer in engine.target.cache.layers if layer.is_sliding)
        assert layer.cumulative_length > 4 * WINDOW and layer.keys.shape[-2] < 2 * WINDOW  # memory stays windowed
    # sampled: seeded n-gram speculation is the seeded plain reply (coupled form), in vocabulary
    plain = SpeculativeEngine(target, None, eos_token_ids=[])
    ngram = SpeculativeEngine(target, NgramProposer(3, 1, 3), eos_token_ids=[])
    spec = SpeculativeEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    for seed in range(3):
        for params in SAMPLED:
            seeded = SamplingParams(**{**params.__dict__, "seed": seed})
            ids = run(plain, params=seeded)[0]
            assert run(ngram, params=seeded)[0] == ids
            assert all(0 <= i < VOCAB for i in run(spec, params=seeded)[0])


def test_a_rollback_further_back_than_the_window_holds_reruns_the_ids_exactly():
    target = mistral()
    backend = TransformersBackend(target)
    with torch.inference_mode():
        first = list(range(16)) * 3  # 48 tokens: far past the window
        backend.forward(first)
        other = first[:20] + [3, 3, 3]  # diverges 28 tokens back
        logits = backend.forward(other, num_logits=3)
        reference = target(input_ids=torch.tensor([other])).logits[0, -3:]
    assert backend.ids == other
    assert torch.allclose(logits, reference, atol=1e-10)


def test_a_failing_crop_leaves_a_reset_cache_that_works_again(llama_pair, monkeypatch):
    target, _ = llama_pair
    backend = TransformersBackend(target)
    with torch.inference_mode():
        backend.forward([1, 2, 3, 4], extra=torch.tensor([5, 6]))
        cache = backend.cache

        def broken(n):
            raise RuntimeError("crop failed")

        monkeypatch.setattr(cache, "crop", broken)
        with pytest.raises(RuntimeError, match="crop failed"):
            backend.forward([1, 2, 3, 4, 9])
        assert backend.cache is None and backend.ids == []
        logits = backend.forward([1, 2, 3, 4, 9])
        reference = target(input_ids=torch.tensor([[1, 2, 3, 4, 9]])).logits[0, -1:]
    assert torch.allclose(logits, reference)


# --- a cache that cannot roll back ----------------------------------------------------------------

def lfm2(vocab: int = VOCAB):
    cfg = Lfm2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                     layer_types=["conv", "full_attention"], eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    return _sharpen(Lfm2ForCausalLM(cfg))


def test_a_cache_that_cannot_roll_back_decodes_plainly_and_says_so_once(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from specchat.engine.session import ChatSession
    from specchat.events import TurnStarted

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        target = lfm2()
    assert not TransformersBackend(target).can_rollback
    engine = SpeculativeEngine(target, NgramProposer(3, 1, 3), eos_token_ids=[])
    assert engine.proposer is None and "cannot roll back" in engine.notice
    got, steps = run(engine, n=20)
    assert got == reference_greedy(target, PROMPT, 20)
    assert all(s.stats.num_draft_tokens == 0 for s in steps)
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chat_model = lfm2(len(tokenizer))
    chat = ChatSession(SpeculativeEngine(chat_model, NgramProposer(3, 1, 3)), tokenizer, sampling=GREEDY,
                       max_new_tokens=3)
    events = [e for text in ("hi", "again") for e in chat.send(text)]
    notes = [e.note for e in events if isinstance(e, TurnStarted)]
    assert "cannot roll back" in notes[0] and notes[1] == ""
    assert not any(type(e).__name__ == "ErrorEvent" for e in events)


# --- non-finite logits ------------------------------------------------------------------------------

class NanAfter(TransformersBackend):
    """The transformers backend whose logits turn NaN from the ``after``-th forward on."""

    def __init__(self, model, after: int, value: float = math.nan):
        super().__init__(model)
        self.calls, self.after, self.value = 0, after, value

    def forward(self, ids, extra=None, num_logits=1):
        self.calls += 1
        logits = super().forward(ids, extra, num_logits)
        return logits.fill_(self.value) if self.calls >= self.after else logits


@pytest.mark.parametrize("value", [math.nan, math.inf])
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, seed=3),
                                    SamplingParams(temperature=0.7, top_k=4, top_p=0.8, seed=3)])
def test_non_finite_target_logits_are_one_clear_error(llama_pair, params, value):
    target, draft = llama_pair
    engine = SpeculativeEngine(NanAfter(target, after=4, value=value), DraftModelProposer(draft, 2), eos_token_ids=[])
    emitted = []
    with pytest.raises(GenerationError) as info:
        for step in engine.generate(PROMPT, params, max_new_tokens=40):
            emitted += [t.id for t in step.tokens]
    message = str(info.value)
    assert "target model" in message and "non-finite" in message and "step 4" in message
    assert "\n" not in message and emitted and all(0 <= i < VOCAB for i in emitted)
    assert engine.target.ids == []  # caches dropped; the engine is usable again
    engine.target.after = 10**9
    assert len(run(engine, n=5)[0]) == 5


def test_non_finite_draft_logits_are_one_clear_error(llama_pair):
    target, draft = llama_pair
    proposer = DraftModelProposer(NanAfter(draft, after=2), 2)
    engine = SpeculativeEngine(target, proposer, eos_token_ids=[])
    with pytest.raises(GenerationError, match="the draft model returned non-finite logits"):
        list(engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=0), max_new_tokens=20))


def test_a_chat_keeps_the_partial_reply_after_nan_logits(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specchat.engine.session import ChatSession
    from specchat.events import ErrorEvent, TurnFinished

    target = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    backend = NanAfter(target, after=5)
    chat = ChatSession(SpeculativeEngine(backend, None, eos_token_ids=[]), tokenizer, sampling=GREEDY,
                       max_new_tokens=20)
    events = list(chat.send("hello"))
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and "non-finite logits" in errors[0].message and "step 5" in errors[0].message
    finished = events[-1]
    assert isinstance(finished, TurnFinished) and finished.finish_reason == "error"
    assert finished.text and chat.history[-1] == {"role": "assistant", "content": finished.text}
    backend.after = 10**9
    assert isinstance(list(chat.send("again"))[-1], TurnFinished)


# --- parameters ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"temperature": math.nan}, {"temperature": math.inf}, {"temperature": -0.1}, {"temperature": "hot"},
    {"top_p": 0.0}, {"top_p": 1.5}, {"top_p": math.nan}, {"top_k": -1}, {"top_k": 2.5},
    {"seed": -1}, {"seed": 2**64}, {"seed": 1.5}, {"seed": True},
])
def test_sampling_parameters_out_of_range_are_one_line_errors(kwargs):
    with pytest.raises(SamplingError) as info:
        SamplingParams(**kwargs)
    key = next(iter(kwargs))
    assert f"sampling.{key}" == info.value.key and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_edges_are_accepted_and_every_entry_point_validates(llama_pair, tiny_tokenizer_dir):
    from dataclasses import replace

    from transformers import AutoTokenizer

    from specchat.engine.session import ChatSession

    SamplingParams(temperature=0, top_p=1.0, top_k=0, seed=0)
    SamplingParams(seed=2**64 - 1)
    with pytest.raises(SamplingError):
        replace(SamplingParams(), temperature=math.nan)
    chat = ChatSession(SpeculativeEngine(llama_pair[0], None), AutoTokenizer.from_pretrained(tiny_tokenizer_dir))
    with pytest.raises(SamplingError):
        chat.set_temperature(math.nan)
    chat.set_temperature(0.3)
    assert chat.sampling.temperature == 0.3


# --- a draft on another device ---------------------------------------------------------------------------

def test_a_draft_on_another_device_samples_with_its_own_generator(llama_pair, monkeypatch):
    """Only CPUs here: the draft declares another device, and the engine's factory of
    generators is watched (it builds CPU ones). On one device both share one stream."""
    target, draft = llama_pair
    made = []

    def generator_on(device, seed):
        if device.type != "cpu":  # the target's own generator is made here too
            made.append(device)
        return torch.Generator().manual_seed(seed)

    monkeypatch.setattr(engine_module, "generator_on", generator_on)

    class Elsewhere(DraftModelProposer):
        sampling_device = torch.device("cuda", 1)

        def __init__(self, *args):
            super().__init__(*args)
            self.sampling_device = torch.device("cuda", 1)
            self.generators = set()

        def propose(self, ids, k, params, generator):
            self.generators.add(id(generator))
            return super().propose(ids, k, params, generator)

    params = SamplingParams(temperature=1.0, seed=5)
    proposer = Elsewhere(draft, 2)
    first = run(SpeculativeEngine(target, proposer, eos_token_ids=[]), params=params, n=20)[0]
    assert made == [torch.device("cuda", 1)] and len(proposer.generators) == 1
    again = run(SpeculativeEngine(target, Elsewhere(draft, 2), eos_token_ids=[]), params=params, n=20)[0]
    assert again == first  # a seed still fixes the reply
    same = DraftModelProposer(draft, 2)
    SpeculativeEngine(target, same, eos_token_ids=[])
    cpu = torch.device("cpu")
    assert made == [torch.device("cuda", 1)] * 2  # once a turn, for the draft elsewhere only
    generator = torch.Generator()
    assert engine_module.draft_generator(same, generator, 5, cpu) is generator  # same device: one shared stream


def test_the_cache_goes_by_the_name_the_model_takes(llama_pair):
    from specchat.engine.backends.transformers import cache_keyword

    target, _ = llama_pair
    assert cache_keyword(target) == "cache"

    class OldStyle(torch.nn.Module):  # remote code written for transformers < 5.24
        def forward(self, input_ids, past_key_values=None, use_cache=None, **kwargs): ...

    class NoCache(torch.nn.Module):
        def forward(self, input_ids, **kwargs): ...

    assert cache_keyword(OldStyle()) == "past_key_values"
    with pytest.raises(TypeError, match="takes no KV cache"):
        cache_keyword(NoCache())
