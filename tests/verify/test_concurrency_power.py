"""``specchat verify --concurrency N`` (verify/batched.py) must fail on real bugs
through each of its checks, not only through the first-token ones.

Found by a mutation trial: tests/verify/test_concurrency.py passes verify's healthy run
and fails it on rows one place off, but through whichever check sees that first, so
planting either bug below would leave it passing (when its run drafts at all, see below).

Its profile is the default's γ = auto. Then the batch's drafts are planned from measured
step times (batch_gamma.py) for every request once an auto one has joined — the γ = 10
and γ = 1 kinds included — and in two of the trial's runs a whole verify drafted once in
150 requests. With every request on one prompt and no drafts, each sequence's row holds
the same logits, so rows one place off changed nothing: verify passed, and that test
failed for want of a FAIL. The profile here drafts a fixed γ = 4 (n-gram lookup), so its
drafts do not depend on timing.

* At temperature 0 only the greedy diff runs. Planted bug: every divergence judged fine
  (``ok = True``): rows one place off then PASS. Here they must FAIL.
* The two-sample check compares the batched drafting samples with one-sequence plain
  samples. Planted bug: the batched samples compared with themselves (always passes).
  Here the check must be handed the two different sets, each of the drafting sample count.
"""

from __future__ import annotations

import numpy as np

from specchat.engine.backends.llamacpp_batch import LlamaCppBatch
import specchat.verify.batched as verify_batched
from tests.verify.test_concurrency import fixed_profile, llama_profile, verify_cli  # noqa: F401 (fixtures)


def test_greedy_batched_verify_fails_on_rows_one_place_off(capsys, fixed_profile, monkeypatch):
    decode_all = LlamaCppBatch.decode_all
    monkeypatch.setattr(LlamaCppBatch, "decode_all", lambda self, rows: np.roll(decode_all(self, rows), 1, axis=0))
    code, out = verify_cli(capsys, fixed_profile, "--concurrency", "4", "--temperature", "0")
    assert code == 1 and "verdict: FAIL" in out, out
    failed = [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert failed and all("greedy batched" in line for line in failed), failed


def test_the_two_sample_check_compares_batched_with_one_sequence_samples(capsys, fixed_profile, monkeypatch):
    seen = []
    two_sample = verify_batched.two_sample

    def spy(name, a, b):
        seen.append((name, np.asarray(a), np.asarray(b)))
        return two_sample(name, a, b)

    monkeypatch.setattr(verify_batched, "two_sample", spy)
    code, out = verify_cli(capsys, fixed_profile, "--concurrency", "4")
    assert code == 0, out
    assert "drafts of different lengths in one decode" in out and "speculation exercised: 0 drafts" not in out
    assert len(seen) == 1, seen
    name, batched, plain = seen[0]
    assert "one-sequence plain" in name
    assert len(batched) == len(plain) == 50  # --samples 50: the drafting ones, and as many plain ones
    assert not np.array_equal(batched, plain)  # independent seeds: two different samples
