"""``specchat doctor``: passes on this machine, and each planted breakage is one failing
line naming its fix (llama-cpp-python missing, a CUDA profile on a CPU machine, a data
dir that is a file, weights larger than free memory, a speculative reply that differs
from plain). Run in-process through specchat.cli.main, as a user runs the command."""

from __future__ import annotations

import os
import struct
import sys

import pytest

from specchat.cli import main

EVERY_CHECK = ("python", "torch", "profile", "cuda", "cpu", "bitsandbytes", "llama-cpp-python",
               "llama.cpp layer inputs", "llama.cpp GPU offload", "llama.cpp build", "target model", "memory",
               "data dir")


def doctor(capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out.splitlines()


def lines_of(lines: list[str], status: str) -> list[str]:
    return [line for line in lines if line.startswith(f"{status} ")]


def only_failure(lines: list[str]) -> str:
    failed = lines_of(lines, "fail")
    assert len(failed) == 1, "\n".join(lines)
    return failed[0]


def test_this_machine_passes_and_every_check_has_its_line(capsys):
    code, lines = doctor(capsys)
    assert code == 0, "\n".join(lines)
    names = [line[8:].split(":")[0] for line in lines[:-1]]
    assert names == list(EVERY_CHECK), names
    assert lines[-1].endswith("0 failure(s)")
    assert all("\x1b" not in line for line in lines)  # no colour off a terminal


def test_llama_cpp_not_importable_fails_the_default_profile(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
    code, lines = doctor(capsys)
    line = only_failure(lines)
    assert code == 1
    assert line.startswith("fail    llama-cpp-python: not importable") and "fix: run `make setup`" in line, line


def test_a_cuda_profile_on_a_cpu_machine_fails_with_the_fix(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    profile = tmp_path / "on-cuda.toml"
    profile.write_text('extends = "smollm2-transformers"\n\n[target]\ndevice = "cuda"\n')
    code, lines = doctor(capsys, "--profile", str(profile))
    line = only_failure(lines)
    assert code == 1
    assert line.startswith("fail    cuda:") and "target.device = 'cuda'" in line and 'set device = "auto"' in line, line


def test_a_data_dir_that_is_a_file_fails(capsys, tmp_path, monkeypatch):
    stray = tmp_path / "not-a-dir"
    stray.write_text("")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(stray))
    code, lines = doctor(capsys)
    line = only_failure(lines)
    assert code == 1
    assert line.startswith(f"fail    data dir: {stray} is not a directory") and "SPECCHAT_DATA_DIR" in line, line


def test_chats_others_can_read_are_warnings_not_failures(capsys, tmp_path, monkeypatch):
    sessions = tmp_path / "data" / "sessions"
    sessions.mkdir(parents=True)
    os.chmod(sessions, 0o755)  # what older versions left
    chat = sessions / "chat.jsonl"
    chat.write_text("{}\n")
    os.chmod(chat, 0o644)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    code, lines = doctor(capsys)
    assert code == 0, "\n".join(lines)
    warnings = lines_of(lines, "warning")
    assert [w.split(":")[0] for w in warnings] == ["warning data dir", "warning chats"], warnings
    assert "(0755)" in warnings[0] and f"chmod 700 {sessions}" in warnings[0]
    assert f"chmod 600 {sessions}/*" in warnings[1]
    os.chmod(sessions, 0o700)
    os.chmod(chat, 0o600)
    code, lines = doctor(capsys)
    assert code == 0 and not lines_of(lines, "warning"), lines


def test_weights_larger_than_free_memory_fail(capsys, monkeypatch):
    from specchat.doctor import models

    monkeypatch.setattr(models, "free_ram_bytes", lambda: 50_000_000)  # 50 MB free; the F16 GGUF is ~270 MB
    code, lines = doctor(capsys)
    line = only_failure(lines)
    assert code == 1
    assert line.startswith("fail    memory: weights need about") and "of 50.0 MB free RAM" in line, line
    assert "fix: close other programs" in line


@pytest.fixture(scope="module")
def default_one_thread(tmp_path_factory) -> str:
    """The default profile on one llama.cpp thread: its own (a thread per core) waits on the
    other test workers' at every op; the smoke's verdict does not depend on it."""
    path = tmp_path_factory.mktemp("profiles") / "default-one-thread.toml"
    path.write_text('extends = "default"\n[target]\nn_threads = 1\n')
    return str(path)


def test_smoke_on_the_default_profile_matches_plain_greedy(capsys, default_one_thread):
    code, lines = doctor(capsys, "--smoke", "--profile", default_one_thread)
    assert code == 0, "\n".join(lines)
    smoke = [line for line in lines if line.startswith("ok      smoke:")]
    assert len(smoke) == 1 and "speculative = plain greedy" in smoke[0] and "16 tokens" in smoke[0], lines


def test_smoke_fails_a_speculative_reply_that_differs_beyond_a_near_tie(capsys, monkeypatch, default_one_thread):
    """The planted bug: the speculative run's 4th token replaced by another one."""
    from specchat.doctor import smoke

    real = smoke._decode

    def corrupted(engine, ids, params):
        tokens, seconds, kept = real(engine, ids, params)
        if engine.proposer is not None:
            tokens[3] = (tokens[3] + 1) % 1000
        return tokens, seconds, kept

    monkeypatch.setattr(smoke, "_decode", corrupted)
    code, lines = doctor(capsys, "--smoke", "--profile", default_one_thread)
    line = only_failure(lines)
    assert code == 1
    assert line.startswith("fail    smoke: speculative differs from plain greedy at token 3"), line
    assert "not a near-tie" in line
    assert "specchat verify" in line


def test_a_hub_model_not_in_the_cache_fails_without_downloading(capsys, tmp_path):
    profile = tmp_path / "hub.toml"
    profile.write_text('extends = "smollm2-transformers"\n\n[target]\nsource = "specchat-tests/not-cached"\n')
    code, lines = doctor(capsys, "--profile", str(profile))
    line = only_failure(lines)
    assert code == 1
    assert line.startswith("fail    target model: 'specchat-tests/not-cached' is not in the Hugging Face cache"), line
    assert "fix: with network, run `hf download specchat-tests/not-cached` once" in line, line
    assert any(line.startswith("warning memory: not estimated") for line in lines)  # no figure made up


def test_a_llama_cpp_without_the_layer_input_api_fails_only_an_eagle3_profile(capsys, monkeypatch):
    from specchat.engine.backends import llamacpp_features

    monkeypatch.setattr(llamacpp_features, "bind", lambda llama_cpp: None)
    code, lines = doctor(capsys)
    assert code == 0 and [w.split(":")[0] for w in lines_of(lines, "warning")] == ["warning llama.cpp layer inputs"]
    code, lines = doctor(capsys, "--profile", "smollm2-eagle3")
    line = only_failure(lines)
    assert code == 1 and line.startswith("fail    llama.cpp layer inputs: this build does not export"), line


@pytest.mark.parametrize("header", [None, b"{oops", b"[" * 100_000 + b"]" * 100_000, b'{"w": {"shape": "3"}}'],
                         ids=["cut-short", "not-json", "nested-too-deeply", "shape-not-a-list"])
def test_a_damaged_safetensors_header_is_one_failing_line(tmp_path, header):
    """doctor sizes a model from its safetensors headers, untrusted like the rest of the
    file: a damaged one is a ModelLoadError (check_models makes it the model's failing
    line, naming the file and the fix), never a traceback. nested-too-deeply is the
    decoder's RecursionError."""
    from specchat.doctor.models import safetensors_params
    from specchat.errors import ModelLoadError

    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x01" if header is None else struct.pack("<Q", len(header)) + header)
    with pytest.raises(ModelLoadError) as info:
        safetensors_params(tmp_path)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{path}: the safetensors header cannot be read (")
    assert line.endswith("— the file is damaged or not safetensors: download it again")
