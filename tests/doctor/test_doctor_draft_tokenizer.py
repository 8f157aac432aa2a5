"""doctor names a GGUF draft whose tokenizer is not its target's in one line (issue 56),
read from the two files' headers, before anything loads."""

from __future__ import annotations

from specchat.config import load_profile
from specchat.doctor.models import check_models
from tests.models.gguf_files import write_gguf

TOKENS = ["<|endoftext|>", "a", "b", "ab", "def"]


def pair_profile(tmp_path, draft_tokens):
    target = write_gguf(tmp_path / "target.gguf", TOKENS, padding=2000)
    draft = write_gguf(tmp_path / "draft.gguf", draft_tokens, padding=100)
    path = tmp_path / "pair.toml"
    path.write_text(f'[target]\nsource = "{target}"\nbackend = "llama.cpp"\n\n[speculation]\nmethod = "draft_model"\n'
                    f'[speculation.draft]\nsource = "{draft}"\nbackend = "llama.cpp"\n')
    return load_profile(str(path))


def line(checks):
    return next((c for c in checks if c.name == "draft tokenizer"), None)


def test_a_draft_of_the_targets_tokenizer_is_ok(tmp_path):
    checks, _ = check_models(pair_profile(tmp_path, TOKENS))
    assert line(checks).status == "ok" and "5 tokens are the target's" in line(checks).detail


def test_a_draft_of_another_tokenizer_is_named_with_the_fix(tmp_path):
    checks, _ = check_models(pair_profile(tmp_path, ["<s>", "x", "y"]))
    check = line(checks)
    assert check.status == "warning" and "is not the target's" in check.detail
    assert "specchat models list" in check.fix
