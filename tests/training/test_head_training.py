"""The training-time test computes exactly what drafting runs (specchat/training/ttt.py).

A random head's step-j output at row i of the unrolled training graph must equal the
pre-norm output of the j-th chained draft after the teacher-forced context 0..i, run
through the drafting step (``step`` of tests/support/eagle3_reference.py, with its KV
cache): same positions, same attention, same inputs. A training graph that shifted RoPE, or attended to the wrong
diagonal, would train a head for a drafting loop that never runs.
"""

import torch

from specchat.training.ttt import Batch, chain_lengths, ttt_forward
from tests.support.eagle3_reference import HeadCache, step
from tests.support.tiny_heads import random_eagle3_head
from tests.support.vocab16 import tiny_lm


def test_ttt_steps_equal_the_drafting_loop():
    target = tiny_lm(3, layers=2, hidden=16)
    head = random_eagle3_head(target, draft_vocab=16, scale=1.0)
    t, steps = 9, 3
    ids = torch.randint(0, 16, (1, t), generator=torch.Generator().manual_seed(0))
    features = torch.randn(1, t, 48, dtype=torch.float64)
    outputs = {}
    # run the TTT graph and keep each step's pre-norm output (the input of head.logits)
    original = head.logits
    head.logits = lambda h: (outputs.setdefault("h", []).append(h), original(h))[1]
    batch = Batch(ids, features, torch.zeros(1, t, 2, dtype=torch.long), torch.ones(1, t, 2),
                  torch.zeros(1, dtype=torch.long), torch.tensor([t]))
    ttt_forward(head, batch, steps)
    head.logits = original
    trained = outputs["h"]  # steps × [1, T, H]
    for i in range(t - steps):
        cache = HeadCache()
        g = head.fuse(features[0, : i + 1])
        out = step(head, cache, ids[0, 1: i + 2], g, list(range(i + 1)))[-1:]
        torch.testing.assert_close(out[0], trained[0][0, i])
        for j in range(1, steps):
            out = step(head, cache, ids[0, i + 1 + j: i + 2 + j], out, [i + j])
            torch.testing.assert_close(out[0], trained[j][0, i])


def test_acceptance_length_counts_consecutive_correct_steps():
    correct = torch.tensor([[[1, 1, 0, 1]], [[1, 0, 1, 1]], [[0, 1, 1, 1]]], dtype=torch.bool)
    assert chain_lengths(correct).tolist() == [[2, 1, 0, 3]]
