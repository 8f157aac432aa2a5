"""The real draft pair (issue 56): Qwen2.5-Coder-1.5B-Instruct Q4_K_M with its 0.5B
sibling, as ``specchat models pull qwen2.5-coder`` leaves them. ``make test-pair`` runs
this tier (``pytest --pair tests/pair``); ``make test`` leaves it out (1.6 GB, opt-in).

No timing is asserted (speed targets live in the benchmarks, docs/benchmarks): γ = auto's
promise is checked through what it decided, and the cost model's word on what it ran."""

from __future__ import annotations

import pytest

from specchat.config import load_profile
from specchat.engine import SamplingParams, SpeculativeEngine
from specchat.engine.gamma.calibrate import calibrate
from specchat.engine.factory import build_proposer
from specchat.models.catalog import PULLS
from specchat.models.pull import is_pulled

pytest.importorskip("llama_cpp")
if not all(is_pulled(f) for f in PULLS["qwen2.5-coder"].files):
    pytest.fail("the pair is not pulled: run `specchat models pull qwen2.5-coder` (make test-pair does)",
                pytrace=False)

PROMPTS = ["Write a Python function that returns the n-th Fibonacci number, with a docstring.",
           "Explain the difference between a list and a tuple in Python in three sentences.",
           "Rename the variable `total` to `acc` and return the whole function:\n\n"
           "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n"]


@pytest.fixture(scope="module")
def pair():
    from specchat.loading.models import load_models

    profile = load_profile("qwen2.5-coder")
    return profile, load_models(profile)


def prompt_ids(loaded, profile, text):
    from specchat.engine.template import ChatTemplate

    return ChatTemplate.of(profile, loaded.tokenizer).prompt_ids([{"role": "user", "content": text}])


def test_the_pair_loads_and_greedy_speculation_equals_plain_up_to_a_reported_near_tie(pair):
    """load_models refuses a draft of another vocabulary; verify at T = 0 runs the
    sampler's exact law and the token-by-token greedy diff (a divergence allowed only at
    a near-tie of the target's top logits, bounded by the format)."""
    from specchat.verify.single import verify

    profile, loaded = pair
    assert loaded.draft is not None and loaded.draft.model_path.endswith("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    report = verify(loaded, profile, samples=100, tokens=2, params=SamplingParams(temperature=0.0, top_p=1.0))
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.passed]
    assert report.passed, "; ".join(failed)


def test_gamma_auto_drafts_only_where_its_cost_model_says_it_pays(pair):
    """Two rounds of three prompts under γ = auto: the cost model prices the steps as run
    at ≥ 0.97× plain, and where it measured that no draft could pay even if every one
    were kept, no reply drafts from it after that: none at all where the timing made
    before the first reply (gamma/calibrate.py) found so, else none in the second round
    (n-gram lookup drafts on where it pays)."""
    profile, loaded = pair
    engine = SpeculativeEngine(loaded.target, build_proposer(profile.speculation, loaded))
    params = SamplingParams(temperature=0.0)
    calibrate(engine, params)  # as a chat and bench make their engines: the draft timed before any reply
    set_aside = engine.controller.cannot_pay("draft_model")
    tokens = cost = 0.0
    second_round = []
    for round_ in range(2):
        for text in PROMPTS:
            engine.reset()
            for step in engine.generate(prompt_ids(loaded, profile, text), params, 64):
                s = step.stats
                if s.predicted_tokens is not None and s.predicted_cost is not None:
                    tokens, cost = tokens + s.predicted_tokens, cost + s.predicted_cost
                if round_ or set_aside:  # the draft model's steps: n-gram lookup drafts where it pays, by design
                    second_round.append(s.num_draft_tokens if s.draft_source == "draft_model" else 0)
    controller = engine.controller
    assert tokens / cost >= 0.97, f"γ = auto ran steps its own cost model priced at {tokens / cost:.2f}× plain"
    ceiling = controller.model.ceiling("draft_model", controller.max_gamma)
    drafted = sum(k > 0 for k in second_round)
    if ceiling is not None and ceiling < 1.0:  # set aside in the first round, at a context not since outgrown
        assert controller.cannot_pay("draft_model")
        assert drafted == 0, f"the draft model drafted on {drafted} of {len(second_round)} steps"


def test_verify_passes_on_the_pair_at_the_profile_temperature(pair):
    from specchat.verify.single import verify

    profile, loaded = pair
    report = verify(loaded, profile, samples=300, tokens=2, gamma=2)
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.passed]
    assert report.passed, "; ".join(failed)
