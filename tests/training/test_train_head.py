"""``specchat train-head`` end to end on a tiny target, in seconds (--smoke).

Every stage runs for real — distillation by the target, teacher-forced features and
soft labels, the training-time-test loop, export — and the exported head loads in the
SpecForge layout, drafts through the engine, and keeps greedy decoding's reply. A second
run with --resume reuses what the first left (no stage runs again).
"""

import json

import torch

from specchat.config import load_profile
from specchat.engine import SamplingParams
from specchat.engine.backends import as_backend
from specchat.engine.proposers.eagle import EagleProposer
from specchat.engine.session import ChatSession
from specchat.heads.eagle3 import Eagle3Head
from specchat.loading import load_models
from tests.support.cli import in_process, run_cli
from tests.support.folded import FoldedEngine
from tests.support.tiny_models import write_tiny_profile


def train_head(*args):
    """train-head in a fresh process, as a user runs it."""
    return run_cli("train-head", *args)


def train_head_here(*args):
    """train-head's main in this process: the same output without ~5 s of imports per run."""
    return in_process("train-head", *args)


def test_smoke_training_writes_a_head_that_drafts(tmp_path, tiny_model_dir):
    profile = write_tiny_profile(tmp_path / "tiny.toml", tiny_model_dir, method="ngram")
    out = tmp_path / "head"
    result = train_head_here("--profile", str(profile), "--smoke", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "held-out acceptance length" in result.stderr and "head written to" in result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    report = json.loads((out / "training.json").read_text())
    assert report["history"]["epochs_done"] == 1 and report["held_out_samples"] >= 1
    assert set(report["stage_seconds"]) == {"distill", "teach"} and "min in all" in result.stderr  # the time it took

    loaded = load_models(load_profile(str(profile)))
    target = as_backend(loaded.target)
    head = Eagle3Head.load(out, target)
    prompt = ChatSession(FoldedEngine(target, None), loaded.tokenizer).prompt_ids([{"role": "user", "content": "Hi"}])
    params = SamplingParams(temperature=0.0)
    plain = [t.id for s in FoldedEngine(target, None).generate(prompt, params, max_new_tokens=16) for t in s.tokens]
    target.reset()
    engine = FoldedEngine(target, EagleProposer(head, target, 3))
    got = [t.id for s in engine.generate(prompt, params, max_new_tokens=16) for t in s.tokens]
    assert got == plain
    assert engine.metrics.num_draft_tokens > 0

    again = train_head_here("--profile", str(profile), "--smoke", "--out", str(out), "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "distill:" not in again.stderr and "teach:" not in again.stderr


def test_paths_named_by_the_user_reach_the_terminal_cleaned(tmp_path, tiny_model_dir):
    """The head's folder is printed in the progress lines and on stdout: an escape sequence
    in its name (a screen clear) is removed, like any untrusted text."""
    profile = write_tiny_profile(tmp_path / "tiny.toml", tiny_model_dir, method="ngram")
    out = tmp_path / "head\x1b[2J\x1b]0;title\x07"
    result = train_head("--profile", str(profile), "--smoke", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "head written to" in result.stderr
    assert "\x1b" not in result.stdout and "\x1b" not in result.stderr.replace("\x1b[A", "")


def test_a_flag_out_of_range_is_one_line_naming_it():
    result = train_head("--batch-tokens", "-1")
    assert result.returncode == 2
    assert "--batch-tokens -1 is out of range" in result.stderr and "0 (the default)" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
