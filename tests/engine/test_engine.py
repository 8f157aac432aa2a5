"""Engine behaviour: greedy equality, stops, budgets, seeds, cancellation, cache reuse."""

import threading

import pytest
import torch

from specchat.engine import DraftModelProposer, NgramProposer, SamplingParams
from specchat.engine.gamma.controller import AdaptiveGamma, FixedGamma
from tests.support.folded import FoldedEngine
from tests.support.vocab16 import tiny_lm

GREEDY = SamplingParams(temperature=0)
PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2], [5], [7, 7, 7, 7], [0, 15, 3, 9, 0, 15, 3]]


def generate(engine, prompt, params=GREEDY, n=40, **kw):
    steps = list(engine.generate(prompt, params, max_new_tokens=n, **kw))
    return [t.id for s in steps for t in s.tokens], steps


def proposers(draft):
    return {
        "draft-3": lambda: DraftModelProposer(draft, 3),
        "draft-1": lambda: DraftModelProposer(draft, 1),
        "draft-auto": lambda: DraftModelProposer(draft, "auto", 6),
        "ngram": lambda: NgramProposer(4, 1, 3),
        "ngram-auto": lambda: NgramProposer("auto", 2, 4, max_speculative_tokens=6),
    }


@pytest.mark.parametrize("kind", ["draft-3", "draft-1", "draft-auto", "ngram", "ngram-auto"])
def test_greedy_speculative_equals_greedy_plain(target, draft, kind):
    plain = FoldedEngine(target, None, eos_token_ids=[])
    engine = FoldedEngine(target, proposers(draft)[kind](), eos_token_ids=[])
    kinds = set()
    for prompt in PROMPTS:
        expected, _ = generate(plain, prompt)
        got, steps = generate(engine, prompt)
        assert got == expected, f"{kind} diverged on {prompt}"
        kinds |= {t.kind for s in steps for t in s.tokens}
    # the runs exercised both acceptances and rejections, so rollback was tested
    if kind.startswith("draft"):
        assert {"accepted", "resampled"} <= kinds


def test_plain_greedy_equals_transformers_generate(target):
    engine = FoldedEngine(target, None, eos_token_ids=[])
    for prompt in PROMPTS:
        ours, _ = generate(engine, prompt, n=20)
        ref = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=20, min_new_tokens=20)
        assert ours == ref[0, len(prompt):].tolist()


def test_provenance_and_step_shape(target, draft):
    engine = FoldedEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    _, steps = generate(engine, PROMPTS[0], SamplingParams(temperature=1.0, seed=3), n=60)
    for step in steps:
        kinds = [t.kind for t in step.tokens]
        k, n = step.stats.num_draft_tokens, step.stats.num_accepted_tokens
        assert kinds[:-1] == ["accepted"] * n and len(kinds) == n + 1
        last = step.tokens[-1]
        assert last.kind == ("target" if k == 0 else "bonus" if n == k else "resampled")
        if last.kind == "resampled":
            assert last.rejected_id is not None and last.rejected_q > 0
            assert last.acceptance_probability == min(1.0, last.rejected_p / last.rejected_q)
        for t in step.tokens:
            assert 0 < t.p <= 1 and t.alternatives and t.alternatives[0].p >= t.alternatives[-1].p


def test_seed_reproducible_and_differs_between_seeds(target, draft):
    a = FoldedEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    b = FoldedEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    p7 = SamplingParams(temperature=1.0, seed=7)
    first, _ = generate(a, PROMPTS[0], p7)
    assert generate(b, PROMPTS[0], p7)[0] == first
    assert generate(a, PROMPTS[0], p7)[0] == first  # again on a warm cache
    assert generate(a, PROMPTS[0], SamplingParams(temperature=1.0, seed=8))[0] != first


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 1.0, 5)])
def test_seeded_ngram_reply_is_the_seeded_plain_reply_for_every_gamma(target, temperature, top_p, top_k):
    """Point-mass drafts are verified in the coupled form (each position's token drawn from a
    uniform fixed by seed and position), so speculation changes how fast a seeded sampled
    reply comes, not which reply: plain, every fixed γ and auto give the same tokens."""
    plain = FoldedEngine(target, None, eos_token_ids=[])
    engines = {name: FoldedEngine(target, make(), eos_token_ids=[]) for name, make in {
        "γ=1": lambda: NgramProposer(1, 1, 3), "γ=4": lambda: NgramProposer(4, 1, 3),
        "auto": lambda: NgramProposer("auto", 1, 3, max_speculative_tokens=6)}.items()}
    accepted = 0
    for seed, prompt in enumerate(PROMPTS):
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
        expected, _ = generate(plain, prompt, params, n=60)
        for name, engine in engines.items():
            got, steps = generate(engine, prompt, params, n=60)
            assert got == expected, f"{name} diverged from plain on {prompt} with seed {seed}"
            accepted += sum(s.stats.num_accepted_tokens for s in steps)
    assert accepted > 0  # drafts were kept, so the equality covers verified steps too


def test_draft_is_prefilled_only_when_the_controller_may_draft(target, draft):
    """A draft model's pass over the prompt is skipped while the adaptive controller is in
    a plain stretch (it would only delay the first token); a later probe catches up."""
    params = SamplingParams(temperature=1.0, seed=1)
    proposer = DraftModelProposer(draft, "auto", 3)
    engine = FoldedEngine(target, proposer, eos_token_ids=[])
    assert isinstance(engine.controller, AdaptiveGamma) and engine.controller.prefills_proposer()
    generate(engine, PROMPTS[0], params, n=3)
    assert len(proposer.lm.ids) >= len(PROMPTS[0]) - 1  # prefilled (and maybe drafted)

    cold = DraftModelProposer(draft, "auto", 3)
    controller = AdaptiveGamma(3, cold)
    controller.plain_run = 5  # as after five steps where no draft length beat a plain step
    engine = FoldedEngine(target, cold, controller=controller, eos_token_ids=[])
    generate(engine, PROMPTS[0], params, n=3)
    assert cold.lm.ids == []  # the draft never ran
    got, _ = generate(FoldedEngine(target, DraftModelProposer(draft, 2), eos_token_ids=[]), PROMPTS[0], GREEDY)
    cold_engine = FoldedEngine(target, DraftModelProposer(draft, 2), controller=FixedGamma(2), eos_token_ids=[])
    cold_engine.proposer.prefill = lambda ids: None  # never prefilled: drafting catches up by itself
    assert generate(cold_engine, PROMPTS[0], GREEDY)[0] == got


@pytest.mark.parametrize("kind", ["plain", "draft", "ngram"])
def test_eos_stops_and_nothing_follows(draft, kind):
    # find a token the target emits greedily, then make it the EOS
    probe = tiny_lm(0, scale=12)
    seq, _ = generate(FoldedEngine(probe, None, eos_token_ids=[]), PROMPTS[0], n=12)
    eos = seq[5]
    target = tiny_lm(0, scale=12, eos=eos)
    proposer = {"plain": None, "draft": DraftModelProposer(draft, 4), "ngram": NgramProposer(4, 1, 3)}[kind]
    engine = FoldedEngine(target, proposer)
    assert engine.eos_token_ids == {eos}
    got, steps = generate(engine, PROMPTS[0], n=12)
    assert got == seq[: seq.index(eos) + 1]
    assert steps[-1].finish_reason == "eos" and all(s.finish_reason is None for s in steps[:-1])


def test_stop_token_ids_and_budget(target, draft):
    engine = FoldedEngine(target, DraftModelProposer(draft, 5), eos_token_ids=[])
    full, _ = generate(engine, PROMPTS[0], n=30)
    # stops at several places, so some fall inside a step with drafts after them
    for stop in dict.fromkeys(full[1:16]):
        got, steps = generate(engine, PROMPTS[0], n=30, stop_token_ids=[stop])
        assert got == full[: full.index(stop) + 1] and steps[-1].finish_reason == "stop", (stop, got)
    for budget in (1, 2, 3, 6, 11):
        got, steps = generate(engine, PROMPTS[0], n=budget)
        assert got == full[:budget] and steps[-1].finish_reason == "length"
        # drafts are cut to the remaining budget: no step verifies tokens it may not emit
        assert all(s.stats.num_draft_tokens + 1 <= budget for s in steps)


def test_context_limit(draft):
    target = tiny_lm(0, scale=12, max_positions=20)
    engine = FoldedEngine(target, DraftModelProposer(draft, 4), eos_token_ids=[])
    got, steps = generate(engine, PROMPTS[0], n=100)
    assert len(PROMPTS[0]) + len(got) == 20 and steps[-1].finish_reason == "context"
    _, steps = generate(engine, list(range(16)) + [1, 2, 3, 4], n=5)
    assert steps == [steps[0]] and steps[0].tokens == () and steps[0].finish_reason == "context"


def test_cancel_from_another_thread_returns_promptly_and_engine_is_reusable(target, draft):
    engine = FoldedEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    got = []
    for step in engine.generate(PROMPTS[0], GREEDY, max_new_tokens=100):
        got += [t.id for t in step.tokens]
        if len(got) >= 5:
            threading.Thread(target=engine.cancel).start()
            threading.Event().wait(0.05)
    assert step.finish_reason == "cancelled" and 5 <= len(got) < 100
    fresh = FoldedEngine(target, None, eos_token_ids=[])
    assert generate(engine, PROMPTS[1], n=20)[0] == generate(fresh, PROMPTS[1], n=20)[0]


def test_multi_turn_reuses_the_shared_prefix(target, draft):
    engine = FoldedEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    reply, steps = generate(engine, PROMPTS[0], n=10)
    assert steps[0].stats.prefill_tokens == len(PROMPTS[0]) - 1
    second_prompt = PROMPTS[0] + reply + [4, 5, 6]
    got, steps = generate(engine, second_prompt, n=10)
    first = steps[0].stats
    assert first.reused_tokens >= len(PROMPTS[0]) + len(reply) - 4  # at most the unverified tail re-runs
    assert first.prefill_tokens == len(second_prompt) - 1 - first.reused_tokens
    fresh = FoldedEngine(target, None, eos_token_ids=[])
    assert got == generate(fresh, second_prompt, n=10)[0]


def test_metrics_add_up(target, draft):
    engine = FoldedEngine(target, DraftModelProposer(draft, 3), eos_token_ids=[])
    _, steps = generate(engine, PROMPTS[0], SamplingParams(temperature=1.0, seed=1), n=80)
    m = engine.turn_metrics
    drafting = [s for s in steps if s.stats.num_draft_tokens]
    assert m.num_drafts == len(drafting) and sum(m.acceptance_histogram) == m.num_drafts
    assert m.num_accepted_tokens == sum(s.stats.num_accepted_tokens for s in steps)
    assert m.mean_acceptance_length == pytest.approx(1 + m.num_accepted_tokens / m.num_drafts)
    assert m.num_tokens == sum(len(s.tokens) for s in steps) == 80
    assert m.target_token_ms is not None, "fixed γ must still time plain calibration steps"
    assert 0 <= m.alpha <= 1 and m.cost_ratio > 0 and m.verify_cost
