"""Sources in other tools' stores resolve read-only to one GGUF file: an Ollama store laid
out as Ollama lays it (manifests/<host>/<namespace>/<model>/<tag> + blobs/sha256-…),
LM Studio's folder, the pulled folder; and models list finds them and pairs drafts."""

import hashlib
import json

import pytest

from specchat.errors import ModelLoadError
from specchat.models import stores
from specchat.models.gguf_meta import read_info
from specchat.models.stores import draft_candidates, find_all
from tests.models.gguf_files import write_gguf

TOKENS = ["<|endoftext|>", "a", "b", "ab", "def", " return"]


def ollama_model(store, name, tag, blob_bytes, draft_bytes=None, extra_layers=()):
    layers = []
    for media, data in [(stores.MODEL_LAYER, blob_bytes), (stores.DRAFT_LAYER, draft_bytes)]:
        if data is None:
            continue
        digest = hashlib.sha256(data).hexdigest()
        (store / "blobs").mkdir(parents=True, exist_ok=True)
        (store / "blobs" / f"sha256-{digest}").write_bytes(data)
        layers.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)})
    layers += list(extra_layers)
    layers.append({"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 1})
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "ollama"


def test_an_ollama_model_resolves_to_its_model_blob_and_its_draft_layer(store, tmp_path):
    target = write_gguf(tmp_path / "t.gguf", TOKENS, "target", padding=4000).read_bytes()
    draft = write_gguf(tmp_path / "d.gguf", TOKENS, "draft", padding=10).read_bytes()
    ollama_model(store, "coder", "1.5b", target, draft)
    blob = stores.resolve("ollama:coder:1.5b", "target")
    assert blob.read_bytes() == target and blob.parent == store / "blobs"
    assert stores.resolve("ollama-draft:coder:1.5b", "speculation.draft").read_bytes() == draft
    assert read_info(blob).name == "target"


def test_latest_is_the_default_tag_and_namespaced_names_resolve(store, tmp_path):
    data = write_gguf(tmp_path / "t.gguf", TOKENS).read_bytes()
    ollama_model(store, "coder", "latest", data)
    assert stores.resolve("ollama:coder", "target").read_bytes() == data
    assert stores.parse_ollama_name("me/coder:q4") == ("registry.ollama.ai", "me", "coder", "q4")


@pytest.mark.parametrize("name", ["../../etc/passwd", "coder:../x", "a/b/c/d", "", "coder:", ".."])
def test_a_name_that_is_not_plain_path_parts_is_refused_in_one_line(store, name):
    with pytest.raises(ModelLoadError) as error:
        stores.resolve(f"ollama:{name}", "target")
    assert "\n" not in str(error.value) and "target.source" in str(error.value)


def test_a_manifest_digest_cannot_point_outside_the_blobs(store, tmp_path):
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "evil" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": stores.MODEL_LAYER, "digest": "sha256:../../x"}]}))
    with pytest.raises(ModelLoadError, match="names no sha256 blob"):
        stores.resolve("ollama:evil", "target")


def test_a_model_not_stored_as_one_gguf_layer_is_named_in_one_line(store, tmp_path):
    data = write_gguf(tmp_path / "t.gguf", TOKENS).read_bytes()
    ollama_model(store, "split", "latest", data, extra_layers=[{"mediaType": stores.MODEL_LAYER,
                                                                 "digest": "sha256:" + "1" * 64}])
    with pytest.raises(ModelLoadError, match="split over 2 model layers"):
        stores.resolve("ollama:split", "target")
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "st" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar"}]}))
    with pytest.raises(ModelLoadError, match="not stored as one GGUF layer"):
        stores.resolve("ollama:st", "target")


def test_missing_models_and_drafts_say_what_to_do(store, tmp_path):
    with pytest.raises(ModelLoadError, match="ollama pull nope:latest"):
        stores.resolve("ollama:nope", "target")
    ollama_model(store, "solo", "latest", write_gguf(tmp_path / "t.gguf", TOKENS).read_bytes())
    with pytest.raises(ModelLoadError, match="carries no draft model"):
        stores.resolve("ollama-draft:solo", "speculation.draft")
    with pytest.raises(ModelLoadError, match="models pull qwen2.5-coder"):
        stores.resolve("pulled:qwen2.5-coder-0.5b-instruct-q4_k_m", "speculation.draft")


def test_a_damaged_or_deep_manifest_is_one_line(store):
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "bad" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("[" * 100_000)
    with pytest.raises(ModelLoadError, match="unreadable"):
        stores.resolve("ollama:bad", "target")


def test_lm_studio_files_resolve_by_publisher_repo_and_file(store, tmp_path):
    repo = tmp_path / "home" / ".lmstudio" / "models" / "lmstudio-community" / "Coder-GGUF"
    one = write_gguf(repo / "Coder-Q4_K_M.gguf", TOKENS)
    write_gguf(repo / "mmproj-Coder-f16.gguf", TOKENS)  # a vision projector is no model
    assert stores.resolve("lmstudio:lmstudio-community/Coder-GGUF", "target") == one
    write_gguf(repo / "Coder-Q8_0.gguf", TOKENS)
    with pytest.raises(ModelLoadError, match="holds 2 GGUF files"):
        stores.resolve("lmstudio:lmstudio-community/Coder-GGUF", "target")
    assert stores.resolve("lmstudio:lmstudio-community/Coder-GGUF/Coder-Q8_0.gguf", "target").name == "Coder-Q8_0.gguf"


def test_models_list_finds_every_store_and_pairs_models_of_one_tokenizer(store, tmp_path):
    big = write_gguf(tmp_path / "t.gguf", TOKENS, "big", padding=5000).read_bytes()
    small = write_gguf(tmp_path / "d.gguf", TOKENS, "small", padding=100).read_bytes()
    other = write_gguf(tmp_path / "o.gguf", ["x", "y"], "other", padding=50).read_bytes()
    ollama_model(store, "coder", "1.5b", big, small)
    ollama_model(store, "coder", "0.5b", small)
    write_gguf(tmp_path / "home" / ".lmstudio" / "models" / "pub" / "Other-GGUF" / "o.gguf", ["x", "y"], padding=50)
    hf = tmp_path / "hf" / "models--org--Tiny-GGUF" / "snapshots" / "abc123"
    write_gguf(hf / "tiny-q4.gguf", ["x", "y"], padding=10)
    (tmp_path / "hf" / "models--org--Tiny-GGUF" / "snapshots" / "abc123" / "junk.gguf").write_bytes(b"GGUF" + b"\xff" * 30)
    found = {f.source: f for f in find_all()}
    assert {"ollama:coder:1.5b", "ollama:coder:0.5b", "lmstudio:pub/Other-GGUF/o.gguf"} <= set(found)
    assert any(s.startswith("org/Tiny-GGUF") for s in found)
    assert found["ollama:coder:1.5b"].note == "carries a draft layer"
    junk = next(f for s, f in found.items() if "junk" in s)
    assert junk.info is None and junk.problem  # a lying header is named, not a crash
    drafts = draft_candidates(list(found.values()))
    assert [d.source for d in drafts["ollama:coder:1.5b"]] == ["ollama:coder:0.5b"]
    assert "ollama:coder:0.5b" not in drafts  # nothing smaller shares its tokenizer
    assert other and all("coder" not in d.source for d in drafts.get("lmstudio:pub/Other-GGUF/o.gguf", []))
