"""doctor asks the loader where a model is (loading.models.locate, offline) instead of
re-deriving its rules (issue 58, item 7): a Hub GGUF is found in the Hugging Face cache
where gguf_path would find it, and named with its download where it is not; the
conversion doctor reports cached is the one the loader would use. Planted bug: a
locate that downloads (doctor must never fetch) is caught by the offline case."""

from __future__ import annotations

import pytest
from huggingface_hub import constants

from specchat.config import load_profile
from specchat.doctor.models import check_models
from specchat.loading import llamacpp
from tests.models.gguf_files import write_gguf


def model_line(tmp_path, extra: str = "") -> str:
    profile = tmp_path / "p.toml"
    profile.write_text(f'[target]\nbackend = "llama.cpp"\nsource = "org/Tiny-GGUF"\ngguf_file = "tiny.gguf"\n{extra}')
    checks, _ = check_models(load_profile(str(profile)))
    (line,) = [f"{c.status} {c.name}: {c.detail} — {c.fix}" for c in checks if c.name == "target model"]
    return line


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # whatever doctor does, nothing leaves this machine
    return tmp_path / "hf" / "models--org--Tiny-GGUF"


def test_a_hub_gguf_not_in_the_cache_names_its_download(tmp_path, hub_cache):
    line = model_line(tmp_path)
    assert line.startswith("fail") and "org/Tiny-GGUF/tiny.gguf is not in the Hugging Face cache" in line, line
    assert "hf download org/Tiny-GGUF tiny.gguf" in line, line


def test_a_cached_hub_gguf_is_found_and_its_conversion_asked_of_the_loader(tmp_path, hub_cache, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    (hub_cache / "refs").mkdir(parents=True)
    (hub_cache / "refs" / "main").write_text("abc123")
    path = write_gguf(hub_cache / "snapshots" / "abc123" / "tiny.gguf", ["a", "b"])
    line = model_line(tmp_path, 'gguf_type = "F16"\n')
    assert line.startswith("ok") and str(path) in line and "on the first start" in line, line
    final = llamacpp.conversion_path(path, "F16")
    final.parent.mkdir(parents=True)
    final.write_bytes(path.read_bytes())
    llamacpp.cache_files.write_record(final, llamacpp.source_fingerprint(final))
    assert "converted to F16 in the cache" in model_line(tmp_path, 'gguf_type = "F16"\n')
