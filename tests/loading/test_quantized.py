"""bitsandbytes 4-bit / 8-bit on CPU, through the real loader, engine and verify.

The tiny target is 64 wide (bitsandbytes' CPU 4-bit kernel packs weights in blocks of
64 inputs × 32 outputs) with a peaked output head, and the draft is its own first layer,
so drafts are sometimes kept and sometimes rejected.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from specchat.cli import main
from specchat.config import load_profile
from specchat.engine import DraftModelProposer, SamplingParams, SpeculativeEngine
from specchat.errors import ModelLoadError
from specchat.loading import load_models
from specchat.verify.near_tie import compute_precision
from tests.support.cli import in_process, run_cli
from tests.support.tiny_models import build_tiny_model, write_tiny_profile


@pytest.fixture(scope="module")
def nf4_target_dir(tmp_path_factory, _tiny_tokenizer):
    return build_tiny_model(tmp_path_factory.mktemp("tiny64"), hidden=64, seed=0, tokenizer=_tiny_tokenizer,
                            head_scale=25.0)


@pytest.fixture(scope="module")
def nf4_profile_path(tmp_path_factory, nf4_target_dir):
    """Greedy, γ = 3; target and its 1-layer draft both in NF4, dtype auto."""
    return write_tiny_profile(tmp_path_factory.mktemp("profiles") / "tiny-nf4.toml", nf4_target_dir, nf4_target_dir,
                              dtype="auto", quantization="4bit-nf4", draft_num_layers=1, max_new_tokens=12)


@pytest.fixture(scope="module")
def nf4(nf4_profile_path):
    profile = load_profile(nf4_profile_path)
    return profile, load_models(profile)


def test_nf4_loads_on_cpu_and_says_so(nf4, nf4_target_dir):
    import bitsandbytes as bnb

    profile, loaded = nf4
    assert isinstance(loaded.target.model.model.layers[0].self_attn.q_proj, bnb.nn.Linear4bit)
    assert isinstance(loaded.draft.model.model.layers[0].mlp.down_proj, bnb.nn.Linear4bit)
    assert len(loaded.draft.model.model.layers) == 1
    info = loaded.info
    assert info["device"] == "cpu" and info["target"]["quantization"] == "4bit-nf4"
    assert info["precision"].startswith(f"target and draft 4bit-nf4 computing in {info['target']['dtype']} — auto: ")
    assert loaded.target.model.config.quantization_config.bnb_4bit_compute_dtype == getattr(torch, info["target"]["dtype"])
    assert compute_precision(loaded.target) == "4bit"
    from transformers import AutoModelForCausalLM

    full = AutoModelForCausalLM.from_pretrained(nf4_target_dir, dtype=getattr(torch, info["target"]["dtype"]))
    # the decoder's linear layers shrink to 4 bits; embeddings and the head stay as they were
    assert info["target"]["memory_bytes"] < full.get_memory_footprint()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_4bit_layers_compute_in_the_models_dtype(dtype):
    from specchat.config.model import ModelSpec
    from specchat.loading.devices import quantization_config

    config = quantization_config(ModelSpec(source="x", quantization="4bit-fp4"), "cpu", "target", dtype)
    assert config.bnb_4bit_compute_dtype == dtype and config.bnb_4bit_quant_type == "fp4"
    assert quantization_config(ModelSpec(source="x", quantization="8bit"), "cpu", "target", dtype).load_in_8bit


@pytest.mark.parametrize("quantization, layer", [("4bit-fp4", "Linear4bit"), ("8bit", "Linear8bitLt")])
def test_fp4_and_8bit_load_and_decode_on_cpu(tmp_path, nf4_target_dir, quantization, layer):
    path = write_tiny_profile(tmp_path / "q.toml", nf4_target_dir, method="none", quantization=quantization)
    loaded = load_models(load_profile(path))
    assert type(loaded.target.model.model.layers[1].mlp.up_proj).__name__ == layer
    steps = list(SpeculativeEngine(loaded.target, None).generate([5, 6, 7], SamplingParams(temperature=0), 4))
    assert sum(len(s.tokens) for s in steps) == 4


def test_a_model_bitsandbytes_cannot_pack_is_one_clear_line(tmp_path, tiny_model_dir):
    # the session's tiny target is 32 wide: its layers cannot be packed in 64-input blocks
    path = write_tiny_profile(tmp_path / "narrow.toml", tiny_model_dir, method="none", quantization="4bit-nf4")
    with pytest.raises(ModelLoadError) as info:
        load_models(load_profile(path))
    message = str(info.value)
    assert "cannot be quantized to 4 bits on CPU" in message and "model.layers.0.self_attn.q_proj" in message
    assert "multiple of 64" in message and 'quantization = "none"' in message


def test_greedy_speculative_equals_plain_up_to_reported_near_ties(nf4):
    from specchat.verify.single import verify

    profile, loaded = nf4
    report = verify(loaded, profile, samples=50, params=SamplingParams(temperature=0), gamma=3)
    noise, check = report.checks[0], next(c for c in report.checks if c.name.startswith("greedy"))
    assert noise.passed and check.passed, (noise.line(), check.line())
    assert "4bit" in check.name
    for divergence in check.extra.get("divergences", []):  # each one reported with its gap
        assert divergence["near_tie"] and divergence["gap"] <= divergence["tolerance"]


def test_seeded_sampled_run_is_reproducible(nf4):
    _, loaded = nf4
    params = SamplingParams(temperature=0.8, top_p=0.95, seed=7)
    ids = loaded.tokenizer("Speculative decoding drafts a few tokens")["input_ids"]

    def reply(engine):
        return [(t.id, t.kind) for s in engine.generate(ids, params, 24) for t in s.tokens]

    def engine():
        return SpeculativeEngine(loaded.target, DraftModelProposer(loaded.draft, 3), eos_token_ids=[])

    reused = engine()
    first = reply(reused)
    assert len(first) == 24 and {"accepted", "resampled"} <= {kind for _, kind in first}
    assert reply(reused) == first  # the same engine, its KV caches reused
    assert reply(engine()) == first


def test_verify_passes_on_a_tiny_nf4_model(nf4_profile_path, capsys):
    code = main(["verify", "--profile", str(nf4_profile_path), "--samples", "400", "--tokens", "2",
                 "--temperature", "0.7", "--gamma", "3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in report["checks"] if not c["passed"]]
    assert report["settings"]["precision"] == "4bit"
    assert report["speculation"]["accepted"] > 50 and report["speculation"]["rejected"] > 50
    assert len(report["checks"]) == 7  # the statistical checks ran, not only the batched-logits, exact-law and diff checks


def test_bitsandbytes_log_noise_stays_off_the_terminal(nf4_profile_path):
    result = run_cli("run", "--profile", str(nf4_profile_path),
                             "--prompt", "Hello there", "--no-record", "--max-new-tokens", "4", timeout=180, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    # bitsandbytes logs a missing optional "kernels" package on bf16 CPUs, and 8-bit casts
    assert "kernels" not in result.stderr and "MatMul8bitLt" not in result.stderr, result.stderr
    assert "precision: target and draft 4bit-nf4 computing in" in result.stderr


def test_quantization_on_cpu_in_float32_is_a_valid_profile(tmp_path):
    path = tmp_path / "cpu-nf4.toml"
    path.write_text('extends = "smollm2-transformers"\n[target]\nquantization = "4bit-nf4"\ndevice = "cpu"\ndtype = "float32"\n')
    assert main(["profiles", "check", str(path)]) == 0


def test_the_shipped_nf4_profile_runs_on_the_embedded_model(embedded_model_dir):
    env = {"SPECCHAT_CACHE_DIR": str(embedded_model_dir.parent.parent)}
    result = in_process("run", "--profile", "smollm2-nf4", "--prompt", "Name three colours.", "--json", "--no-record",
                        "--max-new-tokens", "8", "--seed", "1", env_extra=env)  # main here, no fresh imports
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["models"]["target"]["quantization"] == "4bit-nf4"
    assert summary["finish_reason"] in ("length", "eos") and summary["text"].strip()
