"""Shared fixtures: tiny offline models, profiles pointing at them, the embedded model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One math thread per process: pytest-xdist runs one worker per core, and torch's default
# of a thread per core in every worker (and in every CLI subprocess a test starts)
# oversubscribes the cores, where OpenMP's spinning makes everything many times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from tests.support import tiers  # noqa: E402
from tests.support.needs import LLAMA_CPP_NOT_BUILT, llama_cpp  # noqa: E402
from tests.support.tiers import _fast_tier_guard  # noqa: E402,F401 (autouse: the fast tier's guard)
from tests.support.tiny_models import build_tiny_model, build_tiny_tokenizer, write_tiny_profile  # noqa: E402


# the default profile's backend: without it four catches cannot run (the loosened GGUF
# noise bound, max_tokens ≤ 0, slot reuse, batched rollback), so a run says so at its start
# and again as its last word, not only as a line among the skips
LLAMA_CPP_BUILT = llama_cpp is not None


def missing_backend_banner(skipped: int | None) -> list[str]:
    """The lines a run without llama-cpp-python shouts ([] when it imports); ``skipped``:
    how many tests it cost (None at the start, before any ran)."""
    if LLAMA_CPP_BUILT:
        return []
    cost = "" if skipped is None else f"{skipped} test{'s' if skipped != 1 else ''} skipped, "
    return ["THE LLAMA.CPP BACKEND IS NOT TESTED: llama-cpp-python does not import in this environment",
            f"{cost}among them the only checks of the GGUF noise bound, max_tokens ≤ 0, slot reuse and batched "
            "rollback; this run is NOT a pass of the default profile",
            "make setup builds it (its log: .venv/llama-cpp-build.log); CI (.ci/run) fails without it"]


def _shout(reporter, lines: list[str]) -> None:
    reporter.write_sep("!", "llama.cpp backend missing", red=True, bold=True)
    for line in lines:
        reporter.write_line(line, red=True, bold=True)
    reporter.write_sep("!", red=True, bold=True)


def pytest_sessionstart(session):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = missing_backend_banner(None)
    if lines and reporter is not None and not hasattr(session.config, "workerinput"):  # once, not per xdist worker
        _shout(reporter, lines)


def pytest_addoption(parser):
    tiers.add_option(parser)
    parser.addoption("--pair", action="store_true",
                     help="run tests/pair: the real Qwen2.5-Coder pair (make test-pair; needs specchat models pull qwen2.5-coder)")


def pytest_ignore_collect(collection_path, config):
    # the real pair is 1.6 GB and opt-in: make test leaves tests/pair out, make test-pair runs it
    if collection_path.name == "pair" and collection_path.parent.name == "tests" and not config.getoption("--pair"):
        return True
    return None


def pytest_configure(config):
    tiers.register(config)


def pytest_collection_modifyitems(config, items):
    tiers.apply(config, items)


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Keep the developer's own profiles, themes and sessions out of every test.

    The cache dir is left alone on purpose: the converted embedded model lives
    there and converting it takes ~40 s.
    """
    root = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tiny_tokenizer")
    build_tiny_tokenizer(directory)
    return directory


@pytest.fixture(scope="session")
def _tiny_tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, _tiny_tokenizer) -> Path:
    """A 2-layer random Llama target with a ChatML tokenizer, as a local model dir."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_target"), seed=0, num_layers=2, tokenizer=_tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory, _tiny_tokenizer) -> Path:
    """A 1-layer random Llama draft sharing the target's tokenizer."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_draft"), seed=1, num_layers=1, tokenizer=_tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_profile_path(tmp_path_factory, tiny_model_dir, tiny_draft_dir) -> Path:
    """A draft_model profile (γ=3, greedy, seed 0, 16 new tokens) on the tiny pair."""
    path = tmp_path_factory.mktemp("profiles") / "tiny-draft.toml"
    return write_tiny_profile(path, tiny_model_dir, tiny_draft_dir, method="draft_model")


@pytest.fixture(scope="session")
def tiny_ngram_profile_path(tmp_path_factory, tiny_model_dir) -> Path:
    """An n-gram prompt-lookup profile on the tiny target."""
    path = tmp_path_factory.mktemp("profiles") / "tiny-ngram.toml"
    return write_tiny_profile(path, tiny_model_dir, method="ngram")


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """SmolLM2-135M-Instruct converted to safetensors, cached in the user cache dir.

    The first run converts (~40 s); later runs reuse the cache. Conversion is
    guarded by a file lock and an atomic rename, so xdist workers share one copy.
    """
    from specchat.loading.embedded import ensure_embedded_model

    return ensure_embedded_model()


# --- vocabulary-16 float64 models for the exactness and engine tests ----------------


@pytest.fixture(scope="session")
def target():
    """A sharp random target whose distributions can be enumerated (tests/support/vocab16.py)."""
    from tests.support.vocab16 import tiny_lm

    return tiny_lm(0, scale=12)


@pytest.fixture(scope="session")
def draft(target):
    """A draft that often agrees with ``target``: its weights plus noise."""
    from tests.support.vocab16 import perturbed

    return perturbed(target, seed=1, noise=0.4)


def pytest_terminal_summary(terminalreporter):
    """Says how many tests were skipped and why (tests/support/needs.py gives the skips of a part
    set-up did not build one reason each, e.g. "23 tests skipped: llama.cpp backend not
    built"), then prints the mutation check's table (tests/product/test_mutations.py), which workers
    hand back as a user property of each mutation's report; last, without llama-cpp-python, its
    red banner (missing_backend_banner)."""
    skipped = skip_counts(terminalreporter.stats.get("skipped", []))
    terminalreporter.write_sep("=", "skipped tests")
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count} test{'s' if count != 1 else ''} skipped: {reason}")
    if not skipped:
        terminalreporter.write_line("0 tests skipped")
    parts = []
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            for key, value in getattr(report, "user_properties", ()):
                if key == "mutation_table" and report.when == "call":
                    parts.append(value)
    if parts:
        terminalreporter.write_sep("=", "mutation check: each planted bug, per setting, and the checks that caught it")
        terminalreporter.write_line("\n".join(sorted(parts)))
    if banner := missing_backend_banner(skipped.get(LLAMA_CPP_NOT_BUILT, 0)):
        _shout(terminalreporter, banner)  # the run's last word


def skip_counts(reports) -> dict[str, int]:
    """reason → how many skipped tests gave it (a module skipped whole counts once)."""
    counts: dict[str, int] = {}
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        counts[reason] = counts.get(reason, 0) + 1
    return counts
