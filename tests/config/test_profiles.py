"""Profile loading: shipped profiles, extends, user overrides, results-not-exceptions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specchat import paths
from specchat.config import load_all_profiles, load_profile, profile_files
from specchat.errors import ProfileError, SpecchatError
from tests.support import ROOT
from tests.support.cli import run_cli

SHIPPED = ["default", "smollm2-transformers", "smollm2-nf4", "smollm2-draft", "qwen3-8b-gguf", "qwen3-8b-gguf-ngram", "qwen3-8b", "qwen3-8b-ngram", "qwen3-14b", "llama-3.1-8b", "gemma-2-9b"]


def test_every_shipped_profile_validates_through_the_cli():
    result = run_cli("profiles", "check")
    assert result.returncode == 0, result.stderr
    for name in SHIPPED:
        assert f"ok     {name} " in result.stdout


def test_shipped_profiles_mean_what_the_issue_asks():
    default = load_profile("default")
    assert default.target.source == "embedded:smollm2-135m-instruct"
    assert default.speculation.method == "ngram" and default.speculation.num_speculative_tokens == "auto"
    assert default.sampling.seed is None

    derived = load_profile("smollm2-draft")
    assert derived.speculation.method == "draft_model"
    assert derived.speculation.draft.source == derived.target.source
    assert 1 <= derived.speculation.draft.num_layers < 30

    qwen = load_profile("qwen3-8b")
    assert (qwen.target.source, qwen.target.quantization) == ("Qwen/Qwen3-8B", "4bit-nf4")
    assert qwen.speculation.draft.source == "Qwen/Qwen3-0.6B"
    assert qwen.speculation.num_speculative_tokens == 5
    assert (qwen.sampling.temperature, qwen.sampling.top_p, qwen.sampling.top_k) == (0.6, 0.95, 20)

    ngram = load_profile("qwen3-8b-ngram")  # extends qwen3-8b; the inherited draft is dropped
    assert ngram.target.source == "Qwen/Qwen3-8B"
    assert ngram.speculation.method == "ngram" and ngram.speculation.draft is None
    assert load_profile("qwen3-14b").speculation.draft.source == "Qwen/Qwen3-0.6B"
    assert load_profile("llama-3.1-8b").speculation.draft.source == "meta-llama/Llama-3.2-1B-Instruct"


def test_user_profiles_add_and_override_and_may_extend_the_shipped_one_they_replace():
    user = paths.user_profiles_dir()
    user.mkdir(parents=True)
    (user / "mine.toml").write_text('extends = "default"\ndescription = "mine"\n[sampling]\nseed = 7\n')
    (user / "default.toml").write_text('extends = "default"\n[sampling]\ntemperature = 0.0\n')
    assert {"mine", "default", "qwen3-8b"} <= set(profile_files())
    assert load_profile("mine").sampling.seed == 7
    overridden = load_profile("default")
    assert overridden.source_path == user / "default.toml"
    assert overridden.sampling.temperature == 0.0
    assert overridden.target.source == "embedded:smollm2-135m-instruct"


def test_profile_by_path_and_relative_extends(tmp_path):
    (tmp_path / "base.toml").write_text('[target]\nsource = "org/model"\n[sampling]\ntop_k = 5\n')
    (tmp_path / "child.toml").write_text('extends = "base.toml"\n[sampling]\ntop_p = 0.5\n')
    profile = load_profile(tmp_path / "child.toml")
    assert profile.name == "child"
    assert (profile.sampling.top_k, profile.sampling.top_p) == (5, 0.5)
    assert profile.speculation.method == "ngram"  # the documented default


@pytest.mark.parametrize("text, reason", [
    ("[sampling\n", "line 1"),
    ('extends = "default"\nx = ' + "[" * 500 + "]" * 500 + "\n", "TOML nested too deeply to read"),  # RecursionError
], ids=["syntax", "nested-too-deeply"])
def test_load_all_profiles_reports_a_bad_file_and_keeps_the_rest(text, reason):
    user = paths.user_profiles_dir()
    user.mkdir(parents=True)
    (user / "broken.toml").write_text(text)
    loaded, failed = load_all_profiles()
    assert {p.name for p in loaded} >= set(SHIPPED)
    assert len(failed) == 1 and isinstance(failed[0], ProfileError)
    assert "broken.toml" in str(failed[0]) and reason in str(failed[0])
    with pytest.raises(ProfileError, match=reason):  # named by path, as `profiles check FILE` and `run -p FILE` do
        load_profile(user / "broken.toml")


def test_unknown_profile_name_suggests_the_close_one():
    with pytest.raises(SpecchatError) as info:
        load_profile("qwen3-8")
    assert "unknown profile 'qwen3-8'" in str(info.value)
    assert "did you mean 'qwen3-8b'?" in str(info.value)


def test_replace_updates_one_section():
    profile = load_profile("default").replace(sampling={"seed": 3}, record=False)
    assert profile.sampling.seed == 3 and profile.sampling.top_p == 0.9 and profile.record is False


def test_profiles_list_and_show():
    listed = run_cli("profiles", "list")
    assert listed.returncode == 0
    assert all(name in listed.stdout for name in SHIPPED)
    shown = run_cli("profiles", "show", "qwen3-14b", "--json")
    assert shown.returncode == 0
    import json

    data = json.loads(shown.stdout)
    assert data["target"]["source"] == "Qwen/Qwen3-14B"
    assert data["speculation"]["draft"]["source"] == "Qwen/Qwen3-0.6B"


def test_profiles_ship_inside_the_wheel(tmp_path):
    root = ROOT
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(root), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    import zipfile

    (wheel,) = tmp_path.glob("specchat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "specchat/profiles/default.toml" in names
    assert "specchat/profiles/qwen3-8b.toml" in names
    assert any(n.startswith("specchat/themes/") and n.endswith(".toml") for n in names)
    assert "specchat/demos/tour.txt" in names  # `specchat demo` without --script
    for name in ("question.jsonl", "LICENSE", "SOURCE.md"):  # `bench --prompts spec-bench`, with its licence
        assert f"specchat/bench/prompts/spec-bench/{name}" in names
