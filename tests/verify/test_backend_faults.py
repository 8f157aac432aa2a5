"""``specchat verify`` against a backend whose batched logits are wrong: the fault must not
widen verify's own tolerance. Planted: logits shifted one row on every multi-row call
(or only when drafts are passed), which once measured a "batched-vs-one-token noise" of
20, set a tolerance of 40 and passed at temperature 0. Now the bound is a fixed constant
of the format (near_tie.noise_bound) and a measured difference beyond it fails verify,
through its CLI, at temperature 0 and at the profile's own, on transformers and on
llama.cpp. Each check here is deterministic (no sampling decides it): no false alarms."""

from __future__ import annotations

import pytest

from specchat.cli import main
from specchat.engine.backends.transformers import TransformersBackend
from tests.support.mutations import patched, shifted_rows
from tests.support.needs import LLAMA_CPP_NOT_BUILT

FAULT = "batched logits differ from one-token logits by"


def verify_cli(capsys, profile, *args: str) -> tuple[int, str]:
    code = main(["verify", "--profile", str(profile), "--samples", "50", "--tokens", "2", *args])
    return code, capsys.readouterr().out


def noise_line(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if "batched vs one-token logits" in line)


def assert_fails_on_the_fault(code: int, out: str) -> None:
    assert code == 1 and "verdict: FAIL" in out, out
    line = noise_line(out)
    assert line.startswith("FAIL") and FAULT in line and "more than this format allows" in line, line


def test_the_healthy_backend_passes(capsys, tiny_profile_path):
    code, out = verify_cli(capsys, tiny_profile_path, "--temperature", "0")
    assert code == 0 and noise_line(out).startswith("PASS"), out


@pytest.mark.parametrize("temperature, only_with_drafts", [("0", False), ("0.7", False), ("0", True)],
                         ids=["T=0", "T=0.7", "T=0-only-with-drafts"])
def test_verify_fails_on_shifted_rows_on_transformers(capsys, tiny_profile_path, temperature, only_with_drafts):
    with patched(TransformersBackend, "forward", shifted_rows(TransformersBackend.forward, only_with_drafts)):
        assert_fails_on_the_fault(*verify_cli(capsys, tiny_profile_path, "--temperature", temperature))


@pytest.fixture(scope="module")
def llama_profile(tmp_path_factory):
    """The default profile (embedded SmolLM2 on llama.cpp in BF16, n-gram lookup) at a fixed γ,
    so verify runs one speculative pass, not a second for γ = auto."""
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_NOT_BUILT)
    path = tmp_path_factory.mktemp("profiles") / "llama.toml"
    path.write_text('extends = "default"\n[target]\nbackend = "llama.cpp"\nn_threads = 1\nn_ctx = 1024\n'
                    '[speculation]\nnum_speculative_tokens = 3\n')
    return path


@pytest.mark.parametrize("temperature", [("--temperature", "0"), ()], ids=["T=0", "profile-T"])
def test_verify_fails_on_shifted_rows_on_llama_cpp(capsys, llama_profile, temperature):
    from specchat.engine.backends.llamacpp import LlamaCppBackend

    with patched(LlamaCppBackend, "forward", shifted_rows(LlamaCppBackend.forward)):
        code, out = verify_cli(capsys, llama_profile, *temperature)
    assert_fails_on_the_fault(code, out)
    # the greedy diff judges with the format's bound, not one the fault widened
    greedy = next(line for line in out.splitlines() if "greedy token-by-token diff" in line)
    assert greedy.strip().startswith("FAIL") and "NOT a near-tie" in greedy, greedy
