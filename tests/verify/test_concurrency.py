"""``specchat verify --concurrency N``: verify's sampled checks and greedy diff through the
batched engine (verify/batched.py), on the embedded default profile (llama.cpp).

* It passes on the healthy engine at a small --samples, and its decodes really mix
  sequences verifying different numbers of drafts.
* A planted engine bug fails it: every sequence handed the rows of the decode one
  place off (its neighbour's last row first). That run drafts a fixed γ = 4: under
  γ = auto the batch's drafts follow measured step times, and a run that drafted once in
  150 requests (seen twice) left every sequence's row the same logits (one prompt for
  all), so the planted bug changed nothing. A bug that crashes the engine instead
  (rows sliced past the decode's end) stops verify with its traceback, as it should.
* Usage errors are one line and exit 2: --concurrency outside 1..64, and a profile on
  another backend than llama.cpp.
"""

from __future__ import annotations

import numpy as np
import pytest

from specchat.cli import main
from specchat.engine.backends.llamacpp_batch import LlamaCppBatch
from tests.support.needs import LLAMA_CPP_NOT_BUILT


@pytest.fixture(scope="module")
def llama_profile(tmp_path_factory):
    """The default profile (embedded SmolLM2 on llama.cpp, n-gram lookup, γ = auto), one thread."""
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_NOT_BUILT)
    path = tmp_path_factory.mktemp("profiles") / "llama.toml"
    path.write_text('extends = "default"\n[target]\nbackend = "llama.cpp"\nn_threads = 1\nn_ctx = 1024\n')
    return path


@pytest.fixture(scope="module")
def fixed_profile(llama_profile):
    """The same, drafting a fixed γ = 4: drafts that do not depend on timing."""
    path = llama_profile.with_name("llama-fixed.toml")
    path.write_text(llama_profile.read_text() + "[speculation]\nnum_speculative_tokens = 4\n")
    return path


def verify_cli(capsys, profile, *args: str) -> tuple[int, str]:
    code = main(["verify", "--profile", str(profile), "--samples", "50", "--tokens", "2", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_batched_verify_passes_and_mixes_draft_lengths_in_a_decode(capsys, llama_profile, monkeypatch):
    mixed = []  # per decode: the distinct numbers of rows a sequence asked logits for (k + 1)
    decode_all = LlamaCppBatch.decode_all

    def watched(self, rows):
        wanted: dict[int, int] = {}
        for _, _, seq, wants in rows:
            wanted[seq] = wanted.get(seq, 0) + wants
        mixed.append(len(set(wanted.values())))
        return decode_all(self, rows)

    monkeypatch.setattr(LlamaCppBatch, "decode_all", watched)
    code, out = verify_cli(capsys, llama_profile, "--concurrency", "4")
    assert code == 0 and "verdict: PASS" in out, out
    assert "batched: 4 sequences in each llama.cpp decode" in out
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith(("PASS", "FAIL"))]
    assert len(lines) == 6 and all("batched" in line for line in lines), lines
    assert max(mixed) >= 2  # some decode verified sequences with different numbers of drafts


def test_batched_verify_fails_on_rows_one_place_off(capsys, fixed_profile, monkeypatch):
    decode_all = LlamaCppBatch.decode_all
    monkeypatch.setattr(LlamaCppBatch, "decode_all", lambda self, rows: np.roll(decode_all(self, rows), 1, axis=0))
    code, out = verify_cli(capsys, fixed_profile, "--concurrency", "4")
    assert code == 1 and "verdict: FAIL" in out, out
    failed = [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert failed and all("batched" in line for line in failed), failed


def test_a_batched_law_off_one_sequences_by_more_than_the_formats_noise_fails(capsys, llama_profile, monkeypatch):
    """The sampled checks hold the samples to the law enumerated in a batched context, read
    through the same decode as the engine's: a decode whose logits are off by whole units
    (here every row shifted by a random ±2, as no healthy format is) would move both alike,
    and the check that holds that law to one sequence's logits is what names it."""
    decode, rng = LlamaCppBatch.decode, np.random.default_rng(0)
    monkeypatch.setattr(LlamaCppBatch, "decode", lambda self, rows: (
        lambda out: out + rng.uniform(-2, 2, size=out.shape).astype(out.dtype))(decode(self, rows)))
    code, out = verify_cli(capsys, llama_profile, "--concurrency", "4")
    assert code == 1
    failed = [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert any("logits vs one sequence's" in line for line in failed), failed


@pytest.mark.parametrize("n", ["0", "-1", "65"])
def test_concurrency_out_of_range_is_one_line_and_exit_2(capsys, tiny_profile_path, n):
    assert main(["verify", "--profile", str(tiny_profile_path), "--concurrency", n]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--concurrency" in err and "1 to 64" in err, err


def test_batched_verify_needs_the_llama_cpp_backend(capsys, tiny_profile_path):
    assert main(["verify", "--profile", str(tiny_profile_path), "--concurrency", "4", "--samples", "50"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs the llama.cpp backend" in err, err
