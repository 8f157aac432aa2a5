"""The tiers (tests/tiers.py) follow what a test's code uses, through helpers, imports
inside functions and fixtures' code, so a helper that starts a subprocess or loads a
model tags every test that calls it."""

from __future__ import annotations

import subprocess

import tiers


def _runs_the_cli():
    return subprocess.run(["true"])


def _calls_a_helper_that_runs_the_cli():
    return _runs_the_cli()


def _imports_a_tiny_llama():
    from vocab16 import tiny_lm

    return tiny_lm(0)


def _pure():
    return sorted([3, 1, 2])


def test_a_helper_two_calls_away_gives_its_tier():
    assert tiers._tiers_of_function(_calls_a_helper_that_runs_the_cli, set()) == {"subprocess"}


def test_an_import_inside_a_function_gives_its_tier():
    assert tiers._tiers_of_function(_imports_a_tiny_llama, set()) == {"model"}


def test_pure_code_has_no_tier():
    assert tiers._tiers_of_function(_pure, set()) == set()


def test_this_module_is_in_the_fast_tier(request):
    assert not {m.name for m in request.node.iter_markers()} & set(tiers.SLOW)
