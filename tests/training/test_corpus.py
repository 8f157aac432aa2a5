"""The shipped distillation corpus: distinct, stable, and disjoint from the bench's prompts
(the acceptance reported on ``specchat bench`` sets is on text the head never saw)."""

from __future__ import annotations

from specchat.bench.prompt_sets import load_prompt_sets
from specchat.training.corpus import split, training_prompts


def test_no_bench_prompt_is_trained_on():
    bench = {p.text.strip().lower() for s in load_prompt_sets(["open", "long", "repetitive", "unusual"]) for p in s.prompts}
    corpus = {p.strip().lower() for p in training_prompts()}
    assert not bench & corpus


def test_prompts_are_distinct_and_stable():
    prompts = training_prompts()
    assert len(prompts) == len(set(prompts)) > 600
    assert prompts == training_prompts()  # a resumed run sees the same order
    train, held = split(prompts, 24)
    assert len(held) == 24 and not set(train) & set(held)
