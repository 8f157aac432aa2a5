"""train-head's distillation hands out the training data itself: the features and laws a
batched llama.cpp generation saw for every token it fed equal what the teacher-forced
pass over the finished reply gives (up to the rounding of a batch of several sequences).

A row out of step (the law after token t filed under t+1, another sequence's features)
fails here, where the training would only quietly get worse.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from specchat.engine.backends.llamacpp import LlamaCppBackend
from specchat.engine.backends.llamacpp_batch import LlamaCppBatch
from specchat.loading.gguf_tokenizer import GgufTokenizer
from specchat.training.distill import BatchedGenerator
from specchat.training.pipeline import layer_ids_for
from specchat.training.teacher import teach
from tests.support.mutations import mutant, patched
from tests.support.needs import embedded_llama_backend, needs_llama_cpp

pytestmark = needs_llama_cpp

PROMPTS = ["Explain tides in one sentence.", "Name three colours.", "Write a haiku about tea.",
           "What is 2 + 2?", "Say hello in French."]


@pytest.fixture(scope="module")
def backend() -> LlamaCppBackend:
    return embedded_llama_backend(max_ctx=1024, gguf_type="F16")


def test_generation_hands_out_what_teacher_forcing_would(backend):
    tokenizer = GgufTokenizer(backend.llm)
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}]) for p in PROMPTS]
    layers = layer_ids_for(backend.num_layers)
    generator = BatchedGenerator(backend, n_seq=3, n_ctx_per_seq=256, layer_ids=layers)  # 5 prompts, 3 slots: slots reused
    try:
        samples = dict(generator.generate(chats, 10, [0.0, 0.8, 0.0, 0.8, 0.0], seed=3))
    finally:
        generator.close()
    assert sorted(samples) == list(range(len(PROMPTS)))
    for index, sample in samples.items():
        got = sample.taught
        fed = len(sample.ids) - 1  # the last token picked is never fed
        assert got.ids.tolist() == sample.ids[:fed] and got.features.shape == (fed, 3 * backend.hidden_size)
        assert got.top_ids.shape == got.top_p.shape == (fed, 32) and got.reply_start == len(chats[index])
        want = teach(backend, sample.ids[:fed], sample.reply_start, layers)
        scale = want.features.float().abs().amax(0).clamp_min(1.0)
        assert ((got.features.float() - want.features.float()).abs() / scale).amax() < 0.05, index
        agree = (got.top_ids[:, 0] == want.top_ids[:, 0]).float().mean()
        assert agree >= 0.95, (index, float(agree))
        assert (got.top_p[:, 0].float() - want.top_p[:, 0].float()).abs().amax() < 0.05, index
    backend.reset()


@pytest.mark.parametrize("planted", [False, True], ids=["healthy", "features-in-batch-order"])
def test_each_rows_features_are_its_own_whatever_the_slot_order(backend, planted):
    """Once a finished slot takes the next prompt, a step's rows no longer come in
    ascending seq_id; llama.cpp runs them sorted, and hands a layer's inputs back in that
    order. Two first tokens fed to sequences 2 and 0 (in that order) must each get their
    own features: at position 0 a token's layer inputs depend on it alone, so a third
    decode of each token alone says what they are. Planted bug: the features returned in
    llama.cpp's order (as train-head shipped them until this test) swap the two rows."""
    tokenizer = GgufTokenizer(backend.llm)
    a, b = tokenizer.encode("tides", add_special_tokens=False)[0], tokenizer.encode("colour", add_special_tokens=False)[0]
    layers = layer_ids_for(backend.num_layers)
    generator = BatchedGenerator(backend, n_seq=3, n_ctx_per_seq=64, layer_ids=layers)
    plant = (patched(LlamaCppBatch, "decode", mutant(LlamaCppBatch.decode, [(
        'rows_read[np.argsort(order, kind="stable")]', "rows_read")])) if planted else contextlib.nullcontext())
    try:
        with plant:
            _, both = generator._decode([(a, 0, 2, True), (b, 0, 0, True)])
        _, alone_a = generator._decode([(a, 0, 1, True)])
        generator.context.drop(1)
        _, alone_b = generator._decode([(b, 0, 1, True)])
    finally:
        generator.close()
    scale = np.maximum(np.maximum(abs(alone_a[0]), abs(alone_b[0])), 1.0)  # per feature: a few are huge
    off = [float((abs(got - want) / scale).max()) for got, want in ((both[0], alone_a[0]), (both[1], alone_b[0]))]
    apart = float((abs(alone_a[0] - alone_b[0]) / scale).max())
    assert apart > 0.5  # the two tokens' features tell them apart
    if planted:
        assert min(off) > 0.5, off
    else:
        assert max(off) < 0.05, off
