"""The tiers (tests/support/tiers.py) follow what a test's code uses, through helpers, imports
inside functions and fixtures' code, so a helper that starts a subprocess or loads a
model tags every test that calls it."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT, tiers


def _runs_the_cli():
    return subprocess.run(["true"])


def _calls_a_helper_that_runs_the_cli():
    return _runs_the_cli()


def _imports_a_tiny_llama():
    from tests.support.vocab16 import tiny_lm

    return tiny_lm(0)


def _pure():
    return sorted([3, 1, 2])


def test_a_helper_two_calls_away_gives_its_tier():
    assert tiers._tiers_of_function(_calls_a_helper_that_runs_the_cli, set()) == {"subprocess"}


def test_an_import_inside_a_function_gives_its_tier():
    assert tiers._tiers_of_function(_imports_a_tiny_llama, set()) == {"model"}


def test_pure_code_has_no_tier():
    assert tiers._tiers_of_function(_pure, set()) == set()


def test_the_cli_helpers_are_tagged_by_what_they_run():
    """run_cli starts a process; in_process calls main here (a model, most commands load one)
    and must not be tagged 'subprocess', or its tests would pay for a process they never start;
    the one-line check alone runs nothing."""
    from tests.support import cli

    assert tiers._tiers_of_function(cli.run_cli, set()) == {"subprocess"}
    assert tiers._tiers_of_function(cli.in_process, set()) == {"model"}
    assert tiers._tiers_of_function(cli.assert_one_line_error, set()) == set()


def test_this_module_is_in_the_fast_tier(request):
    assert not {m.name for m in request.node.iter_markers()} & set(tiers.SLOW)


CONFTEST = '''
import importlib.util, sys
sys.path.insert(0, {root!r})
spec = importlib.util.spec_from_file_location("specchat_tests_conftest", {root!r} + "/tests/conftest.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
globals().update({{k: v for k, v in vars(module).items() if not k.startswith("__")}})
'''
HIDDEN = '''
def test_hidden():
    getattr(__import__("sub" + "process"), "run")(["true"])
'''


def test_the_fast_tier_fails_a_test_that_starts_a_subprocess_it_could_not_see(tmp_path):
    """The planted drift: a subprocess started where the tiers' reading cannot see it. The
    whole run passes it; under --fast the guard fails it, naming the tier to give."""
    (tmp_path / "conftest.py").write_text(CONFTEST.format(root=str(ROOT)))
    (tmp_path / "test_hidden.py").write_text(HIDDEN)
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)]
    whole = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    fast = subprocess.run(run + ["--fast"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert whole.returncode == 0, whole.stdout[-2000:]
    assert fast.returncode == 1 and "the fast tier ran a test that starts a subprocess" in fast.stdout, \
        fast.stdout[-2000:]
