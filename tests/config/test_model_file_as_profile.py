"""A GGUF model given where a profile goes (``--profile model.gguf``): one line naming it
a model file, with the profile that runs it — and that profile loads as written. Before,
the model was read whole as text and called "not UTF-8 text (byte 726 …)". Planted bug:
the check skipped — caught."""

from __future__ import annotations

import re

import pytest

from specchat.config import load_profile, loader
from specchat.errors import ProfileError
from tests.support.mutations import patched


def test_a_gguf_as_a_profile_says_what_to_write(tmp_path):
    model = tmp_path / 'my "model".gguf'
    model.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 4)
    with pytest.raises(ProfileError) as error:
        load_profile(str(model))
    message = str(error.value)
    assert "this is a GGUF model file, not a profile" in message and "\n" not in message, message
    assert "not UTF-8" not in message
    # the advice, written out as a profile, loads and names the model
    source = re.search(r'source = ("(?:[^"\\]|\\.)*")', error.value.hint).group(1)
    profile = tmp_path / "my-model.toml"
    profile.write_text(f'[target]\nsource = {source}\nbackend = "llama.cpp"\n[speculation]\nmethod = "ngram"\n')
    loaded = load_profile(str(profile))
    assert loaded.target.source == str(model) and loaded.speculation.method == "ngram"


def test_planted_no_model_file_check_is_caught(tmp_path):
    with patched(loader, "_refuse_a_model_file", lambda file: None), pytest.raises(AssertionError):
        test_a_gguf_as_a_profile_says_what_to_write(tmp_path)
