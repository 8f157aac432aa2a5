"""A bad head is one line naming the file, what is wrong and the fix, and exit code 2 —
through the real CLI, on a tiny transformers target: a head built for another target
(hidden size, layer ids, vocabulary), a corrupt or truncated safetensors file, a pickle
checkpoint, a Medusa checkpoint given as EAGLE-3, and a target that cannot hand out
hidden states.

The good head runs in a fresh process, as a user runs it; the failures call the same main
in this process (tests/support/cli.py's in_process): what they check is main's one line
and exit code, and a fresh interpreter importing torch and transformers cost ~5 s each."""

import json

import pytest
import torch

from specchat.engine.backends.base import Backend
from specchat.errors import ModelLoadError
from specchat.heads.checkpoint import HeadError, read_config
from specchat.heads.eagle3 import Eagle3Head, save_eagle3
from specchat.loading.heads import load_head
from tests.support.cli import in_process, run_cli
from tests.support.tiny_heads import random_eagle3_head
from tests.support.tiny_models import write_tiny_profile
from transformers import AutoModelForCausalLM


@pytest.fixture(scope="module")
def good_head(tiny_model_dir, tmp_path_factory):
    target = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    folder = tmp_path_factory.mktemp("head")
    save_eagle3(random_eagle3_head(target, draft_vocab=100, dtype=torch.float32), folder)
    return folder


def copy_head(good_head, tmp_path, edit_config=None):
    folder = tmp_path / "head"
    folder.mkdir()
    config = json.loads((good_head / "config.json").read_text())
    if edit_config:
        edit_config(config)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes((good_head / "model.safetensors").read_bytes())
    return folder


def run_with_head(tmp_path, tiny_model_dir, head, cli=in_process):
    profile = write_tiny_profile(tmp_path / "eagle.toml", tiny_model_dir, method="eagle3", head=str(head))
    return cli("run", "--profile", str(profile), "--prompt", "hi", "--max-new-tokens", "4")


def one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr[-1500:])
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("specchat: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_a_good_head_runs(tmp_path, tiny_model_dir, good_head):
    result = run_with_head(tmp_path, tiny_model_dir, good_head, cli=lambda *args: run_cli(*args, timeout=120))
    assert result.returncode == 0, result.stderr[-1500:]


CASES = {
    "hidden size": (lambda c: c.update(target_hidden_size=64), ["another target", "hidden size 64"]),
    "layer ids": (lambda c: c.update(eagle_aux_hidden_state_layer_ids=[0, 1, 9]), ["another target", "layer ids"]),
    "vocabulary": (lambda c: c.update(vocab_size=999), ["another target", "vocabulary 999"]),
    "medusa": (lambda c: c.update(medusa_num_heads=4, architectures=["MedusaModel"]), ["Medusa checkpoint"]),
    "two layers": (lambda c: c.update(num_hidden_layers=2), ["num_hidden_layers is 2"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_head_for_another_target_is_one_line(tmp_path, tiny_model_dir, good_head, case):
    edit, fragments = CASES[case]
    line = one_line_error(run_with_head(tmp_path, tiny_model_dir, copy_head(good_head, tmp_path, edit)))
    assert "config.json" in line
    for fragment in fragments:
        assert fragment in line, line


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_weights_file_is_one_line(tmp_path, tiny_model_dir, good_head, damage):
    folder = copy_head(good_head, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(b"\x00garbage" * 64 if damage == "garbage" else data[: len(data) // 2])
    line = one_line_error(run_with_head(tmp_path, tiny_model_dir, folder))
    assert "model.safetensors" in line and "damaged" in line


@pytest.mark.parametrize("text", ["{oops", "[" * 100_000 + "]" * 100_000], ids=["not-json", "nested-too-deeply"])
def test_an_unreadable_config_json_is_one_line(tmp_path, text):
    """Read alone (no target needed): nested-too-deeply is the decoder's RecursionError."""
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(HeadError) as info:
        read_config(tmp_path, Eagle3Head)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{tmp_path / 'config.json'}: config.json cannot be read (")
    assert line.endswith("— download the head again")


def test_a_pickle_checkpoint_is_refused(tmp_path, tiny_model_dir, good_head):
    folder = copy_head(good_head, tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    line = one_line_error(run_with_head(tmp_path, tiny_model_dir, folder))
    assert "pytorch_model.bin" in line and "never from pickle" in line


class NoFeatures(Backend):
    """A backend that declares it cannot hand out hidden states (as llama.cpp does for
    architectures whose graphs keep no layer inputs)."""

    provides_features = False
    features_note = "llama.cpp keeps no layer inputs for the 'mamba' architecture"


def test_a_target_without_features_is_one_line(good_head):
    from specchat.config.model import SpeculationSpec

    with pytest.raises(ModelLoadError) as error:
        load_head(SpeculationSpec(method="eagle3", head=str(good_head)), NoFeatures(), None)
    assert "'mamba' architecture" in str(error.value) and "method = \"ngram\"" in str(error.value)


def test_a_tree_on_a_chain_only_backend_is_one_line(good_head):
    """siblings > 1 drafts a tree; a backend that verifies chains only (a server's)
    says so at load, naming the key."""
    from specchat.config.model import SpeculationSpec

    class ChainsOnly(NoFeatures):
        provides_features = True
        supports_trees = False
        name = "llama-server"

    with pytest.raises(ModelLoadError) as error:
        load_head(SpeculationSpec(method="hybrid", head=str(good_head), siblings=3), ChainsOnly(), None)
    assert error.value.key == "speculation.siblings" and "chains only" in str(error.value)


def test_a_tree_profile_runs_on_transformers(tmp_path, tiny_model_dir, good_head):
    profile = write_tiny_profile(tmp_path / "tree.toml", tiny_model_dir, method="eagle3", head=str(good_head))
    profile.write_text(profile.read_text().replace('method = "eagle3"', 'method = "eagle3"\nsiblings = 3'))
    result = in_process("run", "--profile", str(profile), "--prompt", "hi", "--max-new-tokens", "8", "--json")
    assert result.returncode == 0, result.stderr[-1500:]
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["num_draft_tokens"] > 0
