"""``specchat serve`` with a proposer that has a model of its own: an EAGLE-3 head
(smollm2-eagle3, shipped), the hybrid of n-gram lookup and that head (smollm2-hybrid), and a
draft model (a llama.cpp draft of the embedded GGUF, in a batch context of its own:
engine/batch/lanes.py). Two greedy chats at once, in-process on a
free loopback port: each reply is the one-sequence engine's plain greedy reply (up to a
near-tie: a batch rounds a little differently), and drafts were verified."""

from __future__ import annotations

import json
import threading

import pytest

from tests.engine.batch.test_batched import near_tie_or_equal
from tests.serve.test_serve import chat, request
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp
PROMPTS = ["Repeat after me three times: the quick brown fox jumps over the lazy dog.",
           "What is the capital of France? Answer in one sentence."]
TOKENS = 24
GGUF_DRAFT = '''extends = "default"
[speculation]
method = "draft_model"
num_speculative_tokens = 3
[speculation.draft]
source = "embedded:smollm2-135m-instruct"
backend = "llama.cpp"
n_threads = 1
'''


@pytest.mark.parametrize("profile_name", ["smollm2-eagle3", "smollm2-hybrid", "gguf-draft"])
def test_two_chats_with_a_model_proposer_reply_as_plain_decoding_does(profile_name, tmp_path):
    from specchat.config import load_profile
    from specchat.engine import SamplingParams, SpeculativeEngine
    from specchat.loading import load_models
    from specchat.serve.http import make_server
    from specchat.serve.service import build_service

    if profile_name == "gguf-draft":
        (tmp_path / "gguf-draft.toml").write_text(GGUF_DRAFT)
        profile_name = str(tmp_path / "gguf-draft.toml")
    # one llama.cpp thread: a thread per core waits on the other test workers' at every op
    profile = load_profile(profile_name).replace(target={"n_threads": 1})
    loaded = load_models(profile)
    service = build_service(profile, loaded, parallel=2)
    server = make_server(service, "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port, out = server.server_address[1], {}
    try:
        threads = [threading.Thread(target=lambda p=p: out.__setitem__(
            p, request(port, "POST", "/v1/chat/completions", chat(p, TOKENS)))) for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        server.shutdown()
        server.server_close()
        service.close()
    drafted = 0
    for p in PROMPTS:
        status, data = out[p]
        assert status == 200, data
        reply = json.loads(data)
        ids, stats = reply["choices"][0]["token_ids"], reply["choices"][0]["speculative_decoding_stats"]
        drafted += stats["num_draft_tokens"]
        prompt = reply["prompt_token_ids"]
        loaded.target.reset()
        plain = [t.id for s in SpeculativeEngine(loaded.target, None).generate(
            prompt, SamplingParams(temperature=0.0), TOKENS, service.chat.stop_token_ids) for t in s.tokens]
        assert near_tie_or_equal(loaded.target, prompt, ids, plain) is None, (p, ids, plain)
    assert drafted > 0
