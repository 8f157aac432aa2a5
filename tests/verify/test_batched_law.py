"""verify --concurrency's check that the batched law's logits agree with one sequence's
(verify/batched.py, ``batched_law``), on a stand-in backend whose logits are a fixed
function of the ids (float32, so the bound is the float32 tolerance).

* A clean batch passes; a batch whose logits are off by a whole unit on ONE continuation
  fails, whichever continuation it is: the first read, the last, or one between.
  Planted bug: the check keeps only the last continuation's |Δ| (``worst = …`` instead of
  ``max(worst, …)``) — the offset on the first continuation passes, and that is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specchat.engine.sampling import SamplingParams
from specchat.verify import batched
from tests.support.mutations import mutant, patched

VOCAB, PROMPT = 8, [1, 2, 3]


def logits_of(ids: list[int]) -> torch.Tensor:
    generator = torch.Generator().manual_seed(hash(tuple(ids)) % (1 << 31))
    return 3 * torch.randn(VOCAB, generator=generator)  # [V] float32


class StandIn:
    """A backend of one sequence and its batched context; ``off``: the index of the
    continuation (in the order the check reads them) whose batched logits are shifted."""
    precision = "float32"

    def __init__(self, off: int | None) -> None:
        self.off, self.read = off, 0

    def forward(self, ids, extra=None, num_logits=1) -> torch.Tensor:
        return logits_of(list(ids))[None]  # [1, V]

    def open_batch(self, n: int, ctx: int) -> "StandIn":
        return self

    def decode_all(self, rows) -> np.ndarray:  # the prompt, for every sequence: its last row each
        return np.stack([logits_of(PROMPT).numpy() for *_, wants in rows if wants])

    def decode(self, rows) -> np.ndarray:  # one continuation t, one row per sequence
        t = rows[0][0]
        out = np.stack([logits_of(PROMPT + [t]).numpy() for _ in rows])
        shifted = out + 1.0 if self.read == self.off else out
        self.read += 1
        return shifted

    def drop(self, seq: int, pos: int) -> None:
        pass

    def close(self) -> None:
        pass


def agrees(off: int | None) -> bool:
    target = StandIn(off)
    _, joint, check = batched.batched_law(target, PROMPT, SamplingParams(temperature=1.0), [], n=3, pairs=True)
    assert joint and target.read == VOCAB  # every continuation was read
    return check.passed


@pytest.mark.parametrize("off, passes", [(None, True), (0, False), (VOCAB // 2, False), (VOCAB - 1, False)])
def test_one_continuation_off_by_a_unit_fails_the_check(off, passes):
    assert agrees(off) is passes


def test_planted_only_the_last_continuation_counted_is_caught():
    bug = mutant(batched.batched_law.__wrapped__, [("max(worst, float((logits - alone).abs().max()))",
                                        "float((logits - alone).abs().max())")])
    with patched(batched, "batched_law", bug), pytest.raises(AssertionError):
        test_one_continuation_off_by_a_unit_fails_the_check(0, False)
