"""Medusa-1 checkpoints: what is written loads back (and is what vLLM reads), both layouts
load to the same heads, and every bad head is one line naming the file or key, what is
wrong and the fix — in-process through ``load_head`` and, for the exit code, through the
real CLI on a tiny transformers target."""

import json

import pytest
import torch

from tests.support.cli import in_process
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from specchat.config.model import SpeculationSpec
from specchat.engine.backends.base import Backend
from specchat.engine.backends.transformers import TransformersBackend
from specchat.errors import ModelLoadError
from specchat.heads.eagle3 import save_eagle3
from specchat.heads.medusa import MedusaHead, save_medusa
from specchat.loading.heads import load_head
from tests.support.tiny_heads import random_eagle3_head, random_medusa_head
from tests.support.tiny_models import write_tiny_profile


@pytest.fixture(scope="module")
def tiny_target(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def good_head(tiny_target, tmp_path_factory):
    folder = tmp_path_factory.mktemp("medusa")
    save_medusa(random_medusa_head(tiny_target, num_heads=3, num_layers=2, dtype=torch.float32), folder)
    return folder


def same_heads(a, b, hidden_size):
    x = torch.randn(4, hidden_size)
    torch.testing.assert_close(a(x), b(x))
    assert torch.equal(a.token_map, b.token_map)


def test_round_trip(tiny_target, backend, tmp_path):
    head = random_medusa_head(tiny_target, num_heads=4, num_layers=2, draft_vocab=100, dtype=torch.float32)
    save_medusa(head, tmp_path, dtype=torch.float32)
    same_heads(head, MedusaHead.load(tmp_path, backend), tiny_target.config.hidden_size)


def test_what_is_written_is_vllms_layout(good_head):
    config = json.loads((good_head / "config.json").read_text())
    assert config["architectures"] == ["MedusaModel"] and config["medusa_fc_bias"] is True
    # vLLM's MedusaConfig.from_pretrained: any key with "num" and "heads" (or "layers") is the count
    mapped = {}
    for key, value in config.items():
        if "num" in key and "heads" in key:
            mapped["num_heads"] = value
        elif "num" in key and "layers" in key:
            mapped["num_hidden_layers"] = value
    assert mapped == {"num_heads": 3, "num_hidden_layers": 2}
    names = set(load_file(str(good_head / "model.safetensors")))
    assert names == {f"blocks.{i}.layers.{j}.{w}" for i in range(3) for j in range(2) for w in ("weight", "bias")} | {
        f"lm_heads.{i}.weight" for i in range(3)}


def test_fasterdecoding_layout_loads_to_the_same_heads(tiny_target, backend, tmp_path):
    """FasterDecoding's ModuleList names ({i}.{j}.linear.*, {i}.{L}.weight) in TGI's
    medusa_lm_head.safetensors, with a config that names neither hidden nor vocab size."""
    head = random_medusa_head(tiny_target, num_heads=2, num_layers=1, dtype=torch.float32)
    tensors = {}
    for i in range(2):
        tensors[f"{i}.0.linear.weight"] = head.blocks[i][0].weight.detach().clone()
        tensors[f"{i}.0.linear.bias"] = head.blocks[i][0].bias.detach().clone()
        tensors[f"{i}.1.weight"] = head.lm_heads[i].weight.detach().clone()
    save_file(tensors, str(tmp_path / "medusa_lm_head.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(
        {"medusa_num_heads": 2, "medusa_num_layers": 1, "base_model_name_or_path": "tiny"}))
    same_heads(head, MedusaHead.load(tmp_path, backend), tiny_target.config.hidden_size)


def test_vllm_layout_without_biases_is_bias_free(tiny_target, backend, tmp_path):
    """vLLM builds the blocks without bias unless medusa_fc_bias: such a file (here under
    the medusa_heads. prefix vLLM strips) runs with zero biases."""
    head = random_medusa_head(tiny_target, num_heads=2, dtype=torch.float32)
    with torch.no_grad():
        for blocks in head.blocks:
            blocks[0].bias.zero_()
    tensors = {f"medusa_heads.blocks.{i}.layers.0.weight": head.blocks[i][0].weight.detach().clone() for i in range(2)}
    tensors.update({f"medusa_heads.lm_heads.{i}.weight": head.lm_heads[i].weight.detach().clone() for i in range(2)})
    save_file(tensors, str(tmp_path / "model.safetensors"))
    cfg = {"architectures": ["MedusaModel"], "num_heads": 2, "num_hidden_layers": 1,
           "hidden_size": tiny_target.config.hidden_size, "vocab_size": tiny_target.config.vocab_size}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    same_heads(head, MedusaHead.load(tmp_path, backend), tiny_target.config.hidden_size)


# --- bad heads: one line each -----------------------------------------------------------

def copy_head(good_head, tmp_path, edit_config=None):
    folder = tmp_path / "head"
    folder.mkdir()
    config = json.loads((good_head / "config.json").read_text())
    if edit_config:
        edit_config(config)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes((good_head / "model.safetensors").read_bytes())
    return folder


def load_error(folder, target, **spec) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as error:
        load_head(SpeculationSpec(method="medusa", head=str(folder), **spec), target, None)
    line = str(error.value)
    assert "\n" not in line and "—" in line, line  # one line, with its fix
    return error.value


@pytest.fixture(scope="module")
def backend(tiny_target):
    return TransformersBackend(tiny_target)


CASES = {
    "hidden size": (lambda c: c.update(hidden_size=64), ["another target", "hidden size 64"]),
    "vocabulary": (lambda c: c.update(vocab_size=999), ["another target", "vocabulary 999"]),
    "no heads": (lambda c: c.pop("medusa_num_heads"), ["does not say how many heads"]),
    "more heads": (lambda c: c.update(medusa_num_heads=5), ["tensor blocks.3.0.weight is missing"]),
    "fewer heads": (lambda c: c.update(medusa_num_heads=2), ["blocks.2.0.bias is not among the 2 heads"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_config_is_one_line(tmp_path, good_head, backend, case):
    edit, fragments = CASES[case]
    error = load_error(copy_head(good_head, tmp_path, edit), backend)
    assert error.file and ("config.json" in error.file or "model.safetensors" in error.file)
    for fragment in fragments:
        assert fragment in str(error), str(error)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_weights_file_is_one_line(tmp_path, good_head, backend, damage):
    folder = copy_head(good_head, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(b"\x00garbage" * 64 if damage == "garbage" else data[: len(data) // 2])
    error = load_error(folder, backend)
    assert error.file.endswith("model.safetensors") and "damaged" in str(error)


def test_fasterdecodings_pickle_is_refused(tmp_path, good_head, backend):
    folder = copy_head(good_head, tmp_path)
    (folder / "model.safetensors").rename(folder / "medusa_lm_head.pt")
    assert "medusa_lm_head.pt" in str(load_error(folder, backend)) and "never from pickle" in str(load_error(folder, backend))


def test_an_eagle3_head_given_as_medusa_is_one_line(tmp_path, tiny_target, backend):
    save_eagle3(random_eagle3_head(tiny_target, draft_vocab=100, dtype=torch.float32), tmp_path)
    error = load_error(tmp_path, backend)
    assert "EAGLE-3 head, not a Medusa checkpoint" in str(error) and 'method = "eagle3"' in str(error)


def test_a_medusa_head_given_as_eagle3_is_one_line(good_head, backend):
    """The other direction (checkpoint.py's kind_of)."""
    with pytest.raises(ModelLoadError) as error:
        load_head(SpeculationSpec(method="eagle3", head=str(good_head)), backend, None)
    assert "Medusa checkpoint" in str(error.value) and 'method = "medusa"' in str(error.value)


def test_more_tokens_than_heads_is_one_line(good_head, backend):
    error = load_error(good_head, backend, num_speculative_tokens=5, max_speculative_tokens=8)
    assert error.key == "speculation.num_speculative_tokens" and "3 heads" in str(error)


def test_a_tree_on_a_chain_only_backend_is_one_line(good_head, tiny_target):
    class ChainsOnly(TransformersBackend):
        supports_trees = False
        name = "llama-server"

    backend = ChainsOnly(tiny_target)
    backend.supports_trees = False
    error = load_error(good_head, backend, siblings=3)
    assert error.key == "speculation.siblings" and "chains only" in str(error)


class NoFinalHidden(Backend):
    """A backend that declares it cannot hand out final hidden states (as llama.cpp does
    for architectures whose graphs do not keep the output norm's result)."""

    name = "llama.cpp"
    provides_final_hidden = False
    final_hidden_note = "llama.cpp hands out no final hidden states for the 'mamba' architecture here"


def test_a_target_without_final_hidden_states_is_one_line(good_head):
    error = load_error(good_head, NoFinalHidden())
    assert error.key == "speculation.method" and "'mamba' architecture" in str(error)


# --- through the CLI ------------------------------------------------------------------

def run_with_head(tmp_path, tiny_model_dir, head, *args):
    profile = write_tiny_profile(tmp_path / "medusa.toml", tiny_model_dir, method="medusa", head=str(head))
    # main in this process: its output is the point, not a fresh interpreter (~5 s of imports)
    return in_process("run", "--profile", str(profile), "--prompt", "hi", "--max-new-tokens", "8", *args)


def test_a_medusa_profile_runs(tmp_path, tiny_model_dir, good_head):
    result = run_with_head(tmp_path, tiny_model_dir, good_head, "--json")
    assert result.returncode == 0, result.stderr[-1500:]
    assert json.loads(result.stdout.splitlines()[-1])["num_draft_tokens"] > 0


def test_a_bad_head_exits_2_in_one_line(tmp_path, tiny_model_dir, good_head):
    folder = copy_head(good_head, tmp_path, lambda c: c.update(hidden_size=64))
    result = run_with_head(tmp_path, tiny_model_dir, folder)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-1500:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("specchat: error:")]
    assert len(errors) == 1 and "config.json" in errors[0] and "hidden size 64" in errors[0], result.stderr
