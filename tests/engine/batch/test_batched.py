"""Several replies decoded together (engine/batch/batched.py) on the real embedded GGUF, in F16
(tests/support/needs.py: Q4_1 rounds a batch far more than one-token steps do).

* Greedy: each batched reply — more requests than slots, n-gram drafts of different
  lengths in one decode — equals its one-sequence plain reply, or parts from it first at
  a near-tie of the top two logits (the format's fixed bound, near_tie.py).
* Exact at T > 0 with top-k and top-p: the first token of a sequence batched behind
  another that drafts follows the exact p of its prompt (χ², false alarm 10⁻³). Planted
  bug: every sequence reading the rows one place off fails it.
* A cancelled request ends with "cancelled" and leaves the others' replies unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specchat.engine import NgramProposer, SamplingParams, SpeculativeEngine  # noqa: E402
from specchat.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402
from specchat.engine.backends.llamacpp_batch import LlamaCppBatch  # noqa: E402
from specchat.engine.batch.batched import BatchedEngine, Request  # noqa: E402
from specchat.engine.proposers import Proposal  # noqa: E402
from specchat.engine.sampling import warp  # noqa: E402
from specchat.loading.gguf_tokenizer import GgufTokenizer  # noqa: E402
from specchat.verify.near_tie import near_tie_tolerance
from specchat.verify.stats import goodness_of_fit
from tests.support.needs import embedded_llama_backend, needs_llama_cpp

pytestmark = needs_llama_cpp
GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [
    "Rewrite this with a docstring and type hints: def add(a, b): return a + b",
    "What is the capital of France? Answer in one sentence.",
    "Repeat after me three times: the quick brown fox jumps over the lazy dog.",
    "Name three colours.",
]


@pytest.fixture(scope="module")
def backend() -> LlamaCppBackend:
    return embedded_llama_backend(max_ctx=2048, gguf_type="F16")


@pytest.fixture(scope="module")
def chats(backend) -> list[list[int]]:
    tokenizer = GgufTokenizer(backend.llm)
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}]) for p in PROMPTS]


def run(engine: BatchedEngine, requests: list[Request], cancel_at: dict[int, int] | None = None,
        seen: list | None = None, firsts: dict | None = None):
    """{request: (tokens, finish reasons, drafts accepted)} of one batched generate (every
    step's StepStats appended to ``seen``, each request's first step's put in ``firsts``)."""
    out = {i: ([], [], 0) for i in range(len(requests))}
    steps = {i: 0 for i in range(len(requests))}
    for i, step in engine.generate(requests):
        if seen is not None:
            seen.append(step.stats)
        if firsts is not None:
            firsts.setdefault(i, step.stats)
        tokens, finishes, accepted = out[i]
        out[i] = (tokens + [t.id for t in step.tokens], finishes + ([step.finish_reason] if step.finish_reason else []),
                  accepted + step.stats.num_accepted_tokens)
        steps[i] += 1
        for j, at in (cancel_at or {}).items():
            if steps.get(j) == at and i == j:
                engine.cancel(j)
    return out


def near_tie_or_equal(backend, ids: list[int], got: list[int], want: list[int]) -> str | None:
    """None when ``got`` equals ``want`` or first parts from it at a near-tie; else why not."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if at is None:
        return None if len(got) == len(want) else f"lengths {len(got)} and {len(want)}"
    backend.reset()
    top2 = torch.topk(backend.forward(ids + want[:at])[-1], 2).values.tolist()
    gap, bound = top2[0] - top2[1], near_tie_tolerance(backend.precision, top2[0])
    return None if gap <= bound else f"parts at token {at} with a top-two gap {gap:.3f} > {bound:.3f}"


@pytest.mark.parametrize("gamma", [3, "auto"])
def test_greedy_batched_replies_are_the_one_sequence_replies(backend, chats, gamma):
    """γ = auto plans the batch's drafts together (batch_gamma.py): a choice from the past
    only, so the replies are the same."""
    solo = [[t.id for s in SpeculativeEngine(backend, None).generate(ids, GREEDY, 40) for t in s.tokens]
            for ids in chats]
    engine = BatchedEngine(backend, n_seq=3, proposer_factory=lambda lane: NgramProposer(gamma, 1, 3, 5))
    seen = []
    try:
        got = run(engine, [Request(ids, GREEDY, 40) for ids in chats], seen=seen)  # four requests, three slots
    finally:
        engine.close()
    assert sum(accepted for _, _, accepted in got.values()) > 0  # drafts were verified in the batch
    if gamma == "auto":  # the batch's marginal cost of a row, measured and shown
        assert any(stats.marginal_ms is not None and stats.marginal_ms >= 0 for stats in seen)
    for i, ids in enumerate(chats):
        tokens, finishes, _ = got[i]
        assert len(finishes) == 1 and finishes[0] in ("eos", "length"), finishes
        assert near_tie_or_equal(backend, ids, tokens, solo[i]) is None, (i, tokens, solo[i])


def first_tokens(backend, ids_probe, ids_drafting, params, samples, context=None):
    engine = BatchedEngine(backend, n_seq=2, proposer_factory=lambda lane: NgramProposer(3, 1, 3, 5))
    if context is not None:
        engine.context.close()
        engine.context = engine.runner.context = context(backend, 2, engine.context.n_ctx_per_seq)
    firsts, drafted = [], 0
    try:
        for seed in range(samples):
            p = SamplingParams(params.temperature, params.top_p, params.top_k, seed=seed)
            # the drafting sequence goes first, so the probe's rows follow its drafts
            out = {}
            for i, step in engine.generate([Request(ids_drafting, p, 3), Request(ids_probe, p, 1)]):
                if i == 0 and i not in out:  # the step the probe's first token came from
                    drafted += step.stats.num_draft_tokens
                out.setdefault(i, []).extend(t.id for t in step.tokens)
                if 0 in out and 1 in out:  # the shared step is in: the drafting reply's later steps, alone, tell nothing
                    engine.cancel(0)
            firsts.append(out[1][0])
    finally:
        engine.close()
    return np.array(firsts), drafted


class OffByOne(LlamaCppBatch):
    """The planted bug: the rows of a decode handed out one place off."""

    def decode_all(self, rows):
        logits = super().decode_all(rows)
        return np.roll(logits, 1, axis=0)


@pytest.mark.parametrize("planted", [False, True], ids=["healthy", "rows-off-by-one"])
def test_a_sequence_behind_a_drafting_one_samples_its_exact_law(backend, chats, planted):
    params = SamplingParams(temperature=0.9, top_p=0.9, top_k=6)
    probe, drafting = chats[3], chats[2]
    backend.reset()
    exact = warp(backend.forward(probe), params)[0].double()
    law = {int(i): float(exact[i]) for i in torch.nonzero(exact > 0).flatten()}
    samples = 300 if not planted else 80
    firsts, drafted = first_tokens(backend, probe, drafting, params, samples, OffByOne if planted else None)
    assert drafted >= samples  # the sequence ahead drafted in the very step the probe sampled in
    check = goodness_of_fit("batched first token vs exact p", firsts, law)
    assert len(law) >= 2  # a law with room to be wrong
    if planted:
        assert not check.passed, check.line()
    else:
        assert check.passed, check.line()


def test_cancelling_one_request_leaves_the_others_alone(backend, chats):
    """Three requests on two slots (the third takes the first slot that frees): cancelling
    the second ends it alone; the others' replies are those of a run without the cancel."""
    requests = [Request(ids, GREEDY, 24) for ids in chats[:3]]
    engine = BatchedEngine(backend, n_seq=2, proposer_factory=lambda lane: NgramProposer(3, 1, 3, 5))
    try:
        whole = run(engine, requests)
        cut = run(engine, requests, cancel_at={1: 2})
    finally:
        engine.close()
    assert cut[1][1] == ["cancelled"] and len(cut[1][0]) < len(whole[1][0])
    for i in (0, 2):  # other rows in a decode after the cancel: equal, or parting only at a near-tie
        assert cut[i][1] == whole[i][1] and near_tie_or_equal(backend, chats[i], cut[i][0], whole[i][0]) is None


def test_an_abandoned_generate_leaves_nothing_behind(backend, chats):
    """A consumer that stops reading mid-reply (a closed stream) must not leave cells that
    the next generate's sequences would collide with."""
    engine = BatchedEngine(backend, n_seq=2, proposer_factory=lambda lane: NgramProposer(3, 1, 3, 5))
    try:
        stream = engine.generate([Request(ids, GREEDY, 24) for ids in chats[:2]])
        for _ in range(5):
            next(stream)
        stream.close()
        again = run(engine, [Request(ids, GREEDY, 24) for ids in chats[:2]])
    finally:
        engine.close()
    solo = [[t.id for s in SpeculativeEngine(backend, None).generate(ids, GREEDY, 24) for t in s.tokens]
            for ids in chats[:2]]
    for i in range(2):
        assert near_tie_or_equal(backend, chats[i], again[i][0], solo[i]) is None


class Tree(NgramProposer):
    """Drafts a tree (two first drafts side by side): what a batch cannot verify."""

    def propose(self, ids, k, params, generator):
        return Proposal(torch.tensor([ids[-1], ids[-2]]), None, source="ngram", parents=(-1, -1))


def test_what_the_batched_engine_refuses(backend, chats):
    engine = BatchedEngine(backend, n_seq=2, proposer_factory=lambda lane: Tree(2, 1, 3, 5))
    try:
        with pytest.raises(ValueError, match="empty"):
            list(engine.generate([Request([], GREEDY, 4)]))
        with pytest.raises(ValueError, match="verifies chains of drafts, not ngram's tree"):
            list(engine.generate([Request(chats[0], GREEDY, 4)]))
    finally:
        engine.close()


def test_a_backend_that_does_not_batch_is_one_line():
    from tests.support.vocab16 import tiny_lm

    from specchat.engine.backends.transformers import TransformersBackend

    with pytest.raises(ValueError, match="needs a backend that batches: it decodes one sequence at a time"):
        BatchedEngine(TransformersBackend(tiny_lm(0)))


def test_a_seed_gives_the_one_sequence_reply(backend, chats):
    """Sampled replies draw each token from the uniform fixed by (seed, position), as the
    one-sequence engine does, so a seed gives the same reply batched or alone — up to a
    batch moving a CDF boundary past a uniform (the logits of a batch round a little
    differently), so at least three of four 24-token replies must be equal. A wrong
    position or seed for the uniforms makes them all differ."""
    params = [SamplingParams(temperature=0.8, top_p=0.95, seed=100 + i) for i in range(4)]
    solo = [[t.id for s in SpeculativeEngine(backend, NgramProposer(3, 1, 3, 5)).generate(ids, p, 24)
             for t in s.tokens] for ids, p in zip(chats, params)]
    engine = BatchedEngine(backend, n_seq=4, proposer_factory=lambda lane: NgramProposer(3, 1, 3, 5))
    try:
        got = run(engine, [Request(ids, p, 24) for ids, p in zip(chats, params)])
    finally:
        engine.close()
    same = sum(got[i][0] == solo[i] for i in range(4))
    assert same >= 3, [(got[i][0], solo[i]) for i in range(4)]


def test_a_fixed_gamma_request_keeps_its_gamma_beside_auto_ones(backend, chats):
    """Requests alternate γ = 4 and γ = auto in one batch: the auto ones are planned
    together, the γ = 4 ones are asked for 4 drafts every step their budget allows, as
    alone. (verify --concurrency mixes kinds this way; when the plan took every sequence,
    a run that barely drafted could not see rows handed to the wrong sequence.) Planted
    bug: the batch plan deciding every sequence's drafts fails this."""
    kinds = iter([4, "auto"] * 4)
    engine = BatchedEngine(backend, n_seq=4, proposer_factory=lambda lane: NgramProposer(next(kinds), 1, 3, 5))
    requests = [Request(chats[i % 4], GREEDY, 16) for i in range(4)]
    seen: dict[int, list] = {}
    try:
        for i, step in engine.generate(requests):
            seen.setdefault(i, []).append(step.stats)
    finally:
        engine.close()
    for i in (0, 2):  # γ = 4: min(4, what the budget leaves) every step but FixedGamma's timing step (2nd)
        produced = 0
        for j, stats in enumerate(seen[i]):
            want = 0 if j == 1 else min(4, 15 - produced)
            assert stats.num_speculative_tokens == want, (i, j, produced, stats.num_speculative_tokens)
            produced += 1 + stats.num_accepted_tokens
    assert any(s.predicted_gain is not None for s in seen[1] + seen[3]), "auto ones are planned, timed beside them"
