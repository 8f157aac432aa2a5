"""The mutation check: each planted bug (tests/support/mutations.py) must fail at least one
check in every sampling setting it changes the output in, and the table of where each
is caught is printed at the end of the test run (conftest.py's terminal summary).

The checks are the ones test_exactness_steps.py runs on the real code (same functions,
same seeds, same sample sizes), so "caught" here means "that test fails with this bug".
A check counts as catching the bug when it raises AssertionError (a statistical one:
p < ALPHA = 1e-3). For each bug and setting the applicable checks run cheapest first:
the sampler-level ones (rejection_sample's exact law, a draft's q against its drafts;
milliseconds) always, the engine-level ones (greedy and seeded equality, multi-step
joints; seconds each) only where nothing cheaper caught the bug, to keep the suite
fast — set SPECCHAT_MUTATIONS=all to run every applicable check (a few minutes) and
see the engine-level tests' own power in the table.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.engine import test_exactness_steps as checks
from tests.support.mutations import MUTATIONS, Mutation

# (name, applies to (mutation, setting) → bool, run(target, draft, setting)), cheapest
# first; the first four are the sampler-level ones
SAMPLER_LEVEL = 4
CHECKS = [
    ("rejection_sample law", lambda m, s: True, lambda t, d, s: checks.check_sampler_law(s)),
    ("host sampler law", lambda m, s: True, lambda t, d, s: checks.check_host_law(s)),
    ("draft q vs its drafts (vocab 16)", lambda m, s: s != "greedy", lambda t, d, s: checks.check_draft_q(s, 16)),
    ("draft q vs its drafts (vocab 12)", lambda m, s: s != "greedy", lambda t, d, s: checks.check_draft_q(s, 12)),
    ("greedy equality (draft model)", lambda m, s: s == "greedy",
     lambda t, d, s: checks.check_greedy_equal(t, d, "draft")),
    ("greedy equality (n-gram)", lambda m, s: s == "greedy", lambda t, d, s: checks.check_greedy_equal(t, d, "ngram")),
    ("seeded n-gram == plain", lambda m, s: True, lambda t, d, s: checks.check_coupled_equal(t, s)),
    ("seeded host == device", lambda m, s: True, lambda t, d, s: checks.check_host_equals_device(t, s)),
    ("multi-step joint (draft)", lambda m, s: s != "greedy", lambda t, d, s: checks.check_steps_joint("draft", s)),
    ("multi-step joint (draft vocab 12)", lambda m, s: s != "greedy" and m.name == "padded-vocab-q-misaligned",
     lambda t, d, s: checks.check_steps_joint("draft-vocab12", s)),
    ("multi-step joint (point mass)", lambda m, s: s != "greedy" and m.name == "bonus-from-wrong-row",
     lambda t, d, s: checks.check_steps_joint("point-mass", s)),
    ("multi-step joint (real KV cache)", lambda m, s: s != "greedy" and m.name == "no-kv-rollback",
     lambda t, d, s: checks.check_steps_joint_real(t, d, s)),
]


FULL = os.environ.get("SPECCHAT_MUTATIONS") == "all"


def run_mutation(mutation: Mutation, target, draft) -> dict[str, list[str]]:
    """setting → names of the checks that failed with the bug planted."""
    caught: dict[str, list[str]] = {}
    with mutation.plant():
        for setting in mutation.settings:
            caught[setting] = []
            for i, (name, applies, run) in enumerate(CHECKS):
                if not applies(mutation, setting):
                    continue
                if i >= SAMPLER_LEVEL and caught[setting] and not FULL:
                    continue
                try:
                    run(target, draft, setting)
                except AssertionError:
                    caught[setting].append(name)
    return caught


def table(mutation: Mutation, caught: dict[str, list[str]]) -> str:
    """The bug and, per setting, the checks that failed (✗ = not caught)."""
    lines = [f"{MUTATIONS.index(mutation) + 1}. {mutation.name}: {mutation.description}"]
    for setting, names in caught.items():
        lines.append(f"      {setting:<20} {', '.join(names) if names else '✗ NOT CAUGHT'}")
    return "\n".join(lines)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_planted_bug_is_caught_in_every_setting(mutation, target, draft, record_property):
    started = time.perf_counter()
    caught = run_mutation(mutation, target, draft)
    text = table(mutation, caught) + f"\n      ({time.perf_counter() - started:.1f} s)"
    record_property("mutation_table", text)
    missed = [setting for setting, names in caught.items() if not names]
    assert not missed, f"{mutation.name} slipped through in {missed}\n{text}"
