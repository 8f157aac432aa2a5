"""Batched verification is exact when the sequences of one decode draft different numbers
of tokens (engine/batch/batched.py), at T > 0 with top-k and top-p, on the real embedded GGUF.

Four requests share every decode, each on its own prompt and drafting its own fixed k =
0, 1, 2, 3 (test-only proposers: at k = 1 and 3 point masses, the prompt's greedy
continuation; at k = 2 drafts drawn from a law q of its own, as a draft model's or a
head's are, so drafts are kept, rejected and followed by a bonus token). For each
sequence the law of its first two tokens over 160 seeds is compared, by verify's χ² and
TV rule (verify_stats.goodness_of_fit, cells expected < 5 times pooled: 5 to 15 cells),
with the exact joint p(t1)·p(t2 | t1) enumerated from the target's one-sequence logits,
warped by the same SamplingParams. False alarm: about 0.2 % per sequence, under 1 % for
the four; the seeds are fixed, so a run repeats.

Planted bugs (one-line mutants of the engine's code, tests/support/mutations.py), each run here
on 30 seeds: rows handed out by the first sequence's k, right only when every k is equal
(k = 2 and 3 fail, χ² p ~1e-36), and the bonus token drawn from q, the last draft's point
mass, instead of p (k = 1 fails, χ² p ~1e-21). The token after a rejection drawn from p
instead of the residual norm(max(p − q, 0)) was planted here too (k = 2 failed, on 160 seeds):
a batch verifies through the one sequence's own step() and rejection_sample, where
tests/product/test_mutations.py's resample-from-p kills it at every sampling setting, so it
is no longer run twice (13 s). Skipping the rollback of rejected drafts
(``self.context.drop``) never reaches the statistics: llama.cpp refuses the next token at
a position the stale draft still holds (llama_decode fails), which is asserted instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import deque

import numpy as np
import pytest
import torch

from specchat.engine.batch.batched import BatchedEngine, Request, _Together
import specchat.engine.engine as engine_module
from specchat.engine.proposers import Proposal, Proposer
from specchat.engine.sampling import SamplingParams, warp
from specchat.loading.gguf_tokenizer import GgufTokenizer
from specchat.verify.single import _exact_first_two, _pair_codes
from specchat.verify.stats import goodness_of_fit
from tests.support.mutations import mutant, patched
from tests.support.needs import embedded_llama_backend, needs_llama_cpp

pytestmark = needs_llama_cpp
PARAMS = SamplingParams(temperature=0.8, top_p=0.95, top_k=10)
# (question, the reply so far, drafts per step): each prompt's next token has a likely
# value (p 0.3 to 0.75 at these settings) and a few others, so greedy drafts are kept
# and rejected
PROMPTS = [
    ("Describe a city.", "The city is big and the city is", 0),
    ("What is the capital of France? Answer in one sentence.", "", 1),
    ("List some fruits.", "Apples, bananas,", 2),
    ("Write a poem about the sea.", "The sea is blue, the sea is", 3),
]
SAMPLES = 160
Q_SCRIPT = 0.6  # Lawful's q of the script's token (the greedy one: p 0.3 to 0.75 here)
PLANTED_SAMPLES = 30


class Scripted(Proposer):
    """Drafts the next k tokens of a fixed script (the prompt's greedy continuation),
    whatever the context says: point masses, no model state."""

    kind = "scripted"
    point_mass = True

    def __init__(self, script: list[int], start: int, k: int) -> None:
        super().__init__(k)
        self.script, self.start = script, start

    def propose(self, ids, k, params, generator):
        at = len(ids) - self.start
        return Proposal(torch.tensor(self.script[at:at + k], dtype=torch.long), None, source=self.kind)


class Lawful(Scripted):
    """Draws each of its k drafts from a law q of its own, with the request's generator:
    Q_SCRIPT on the script's token there, the rest spread evenly over the script's other
    tokens (some of them outside top-k: p = 0, always rejected). The rejection sampler
    then verifies drafts that carry q, beside point masses in the same decode."""

    kind = "lawful"
    point_mass = False

    def propose(self, ids, k, params, generator):
        at = len(ids) - self.start
        vocab = self.vocab_size
        tokens, laws = [], []
        for token in self.script[at:at + k]:
            others = [t for t in dict.fromkeys(self.script) if t != token]
            q = torch.zeros(vocab, dtype=torch.float64)
            q[others] = (1 - Q_SCRIPT) / len(others)
            q[token] = Q_SCRIPT
            tokens.append(int(torch.multinomial(q, 1, generator=generator)))
            laws.append(q)
        return Proposal(torch.tensor(tokens, dtype=torch.long), torch.stack(laws) if laws else None,
                        source=self.kind)


@pytest.fixture(scope="module")
def backend():
    return embedded_llama_backend(max_ctx=2048)


@pytest.fixture(scope="module")
def prompts(backend):
    return exact_prompts(backend)


def exact_prompts(backend) -> list[tuple[list[int], int, list[int], dict[int, float]]]:
    """[(ids, k, greedy continuation, exact joint of the first two tokens)]"""
    tokenizer = GgufTokenizer(backend.llm)
    out = []
    eos = sorted(backend.eos_token_ids)
    for question, reply, k in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question}])
        ids += tokenizer(reply, add_special_tokens=False)["input_ids"] if reply else []
        backend.reset()
        greedy = list(ids)
        for _ in range(k + 1):
            greedy.append(int(backend.forward(greedy)[-1].argmax()))
        backend.reset()
        p_first = warp(backend.forward(ids), PARAMS)[0]
        out.append((ids, k, greedy[len(ids):], _exact_first_two(backend, ids, PARAMS, p_first, eos)))
    return out


def first_two(backend, prompts, samples: int) -> tuple[list[np.ndarray], list[int]]:
    """Each request's first two tokens over ``samples`` batched generates ([samples, 2]
    per request; a reply that ended after one token reads -1 second), and the drafts each
    request had verified in its first step."""
    # k = 2 drafts with a law q of its own, k = 1 and 3 point masses
    proposers = [(Lawful if k == 2 else Scripted)(script, len(ids), k) if k else None
                 for ids, k, script, _ in prompts]
    queue: deque[Scripted | None] = deque()  # the engine takes requests in order: request i gets proposer i
    engine = BatchedEngine(backend, n_seq=len(prompts), proposer_factory=lambda lane: queue.popleft())
    got = [np.full((samples, 2), -1, dtype=np.int64) for _ in prompts]
    drafted = [0] * len(prompts)
    try:
        for seed in range(samples):
            queue.extend(proposers)
            requests = [Request(ids, dataclasses.replace(PARAMS, seed=len(prompts) * seed + i), max(2, k + 1))
                        for i, (ids, k, _, _) in enumerate(prompts)]
            tokens: list[list[int]] = [[] for _ in prompts]
            for i, step in engine.generate(requests):
                if not tokens[i]:
                    drafted[i] += step.stats.num_draft_tokens
                tokens[i] += [t.id for t in step.tokens]
                if len(tokens[i]) >= 2 and not step.finish_reason:
                    engine.cancel(i)  # its first two tokens are in: the rest is not read
            for i, t in enumerate(tokens):
                got[i][seed, :len(t[:2])] = t[:2]
    finally:
        engine.close()
    return got, drafted


# the planted bugs, each a one-line change to the engine's own code, and the error it
# raises where llama.cpp itself refuses what it leads to (None: the statistics must see it)
BUGS = {
    "rows-by-first-k": (lambda: patched(_Together, "decode", mutant(_Together.decode, [(
        "at += k + 1", "at += len(proposals[0].tokens) + 1")])), None),
    "bonus-from-q": (lambda: patched(engine_module, "emitted", mutant(engine_module.emitted, [(
        'Token(id=nxt[k], kind="bonus"', 'Token(id=dl[k - 1], kind="bonus"')])), None),
    # the next step's token lands on a position the sequence's stale draft still holds
    "no-rollback": (lambda: patched(_Together, "rollback", mutant(_Together.rollback, [(
        "self.context.drop(seq.lane, len(seq.ids) + result.num_accepted)", "pass")])), "llama_decode failed"),
}


@pytest.mark.parametrize("planted", [None, *BUGS], ids=["healthy", *BUGS])
def test_sequences_drafting_different_k_in_one_batch_sample_the_exact_law(backend, prompts, planted):
    samples = SAMPLES if planted is None else PLANTED_SAMPLES
    plant, refused = BUGS[planted] if planted else (contextlib.nullcontext, None)
    with plant():
        if refused:
            with pytest.raises(RuntimeError, match=refused):
                first_two(backend, prompts, samples)
            return
        got, drafted = first_two(backend, prompts, samples)
    vocab = backend.vocab_size + 1
    checks = []
    for (ids, k, _, joint), seqs, d in zip(prompts, got, drafted):
        assert d == k * samples  # every first step drafted its k, in a batch with the others
        checks.append(goodness_of_fit(f"k={k}: first two tokens vs exact joint", _pair_codes(seqs, vocab), joint))
    lines = "\n".join(c.line() for c in checks)
    if planted:
        assert not all(c.passed for c in checks), lines
    else:
        assert all(c.passed for c in checks), lines
