"""``specchat doctor --profile qwen3-8b`` on a machine without CUDA, as a newcomer runs it:
the cuda line warns that the profile is made for a CUDA GPU (it said "ok … models run on
the CPU"), and a model not in the Hugging Face cache names the command that fetches it
(it said "run once with network", and not what to run). Planted bug: the GPU-only check
skipped — caught."""

from __future__ import annotations

import pytest

from specchat.cli import main
from specchat.doctor import checks
from tests.support.mutations import mutant, patched


def doctor_lines(capsys, profile: str) -> list[str]:
    main(["doctor", "--profile", profile])
    return capsys.readouterr().out.splitlines()


def test_a_gpu_profile_on_a_cpu_machine_warns_and_names_the_download(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    lines = doctor_lines(capsys, "qwen3-8b")
    (cuda,) = [line for line in lines if line[8:].startswith("cuda:")]
    assert cuda.startswith("warning cuda:") and "made for a CUDA GPU" in cuda and "CPU profile" in cuda, cuda
    (target,) = [line for line in lines if line[8:].startswith("target model:")]
    assert "is not in the Hugging Face cache" in target and "hf download Qwen/Qwen3-8B" in target, target
    # a CPU profile's cuda line stays ok
    assert any(line.startswith("ok      cuda:") for line in doctor_lines(capsys, "default"))


def test_planted_gpu_only_check_skipped_is_caught(capsys):
    bug = mutant(checks.check_cuda, [("if profile.needs_gpu:", "if False:")])
    with patched(checks, "check_cuda", bug), pytest.raises(AssertionError):
        test_a_gpu_profile_on_a_cpu_machine_warns_and_names_the_download(capsys)
