"""A run without llama-cpp-python says so loudly (tests/conftest.py): a red banner when the
session starts and again as the summary's last word, naming how many tests it cost and
the catches that only run there, beside the plain skip counts. With the backend built,
neither appears. Planted bug: the summary without its banner (the skip line alone) —
caught."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import conftest


class Reporter:
    def __init__(self, skipped_reason: str, count: int) -> None:
        report = SimpleNamespace(longrepr=("file", 1, f"Skipped: {skipped_reason}"))
        self.stats = {"skipped": [report] * count}
        self.out: list[tuple[str, dict]] = []

    def write_sep(self, sep, title="", **markup):
        self.out.append((f"{sep * 3} {title}", markup))

    def write_line(self, line, **markup):
        self.out.append((line, markup))


def summary(built: bool, monkeypatch) -> list[tuple[str, dict]]:
    monkeypatch.setattr(conftest, "LLAMA_CPP_BUILT", built)
    reporter = Reporter(conftest.LLAMA_CPP_NOT_BUILT, 0 if built else 23)
    conftest.pytest_terminal_summary(reporter)
    return reporter.out


def test_a_run_without_llama_cpp_ends_on_a_red_banner(monkeypatch):
    out = summary(False, monkeypatch)
    assert (f"23 tests skipped: {conftest.LLAMA_CPP_NOT_BUILT}", {}) in out  # the count stays
    last = out[-5:]
    assert last[0][0].startswith("!!!") and all(markup.get("red") and markup.get("bold") for _, markup in last)
    text = " ".join(line for line, _ in last)
    assert "LLAMA.CPP BACKEND IS NOT TESTED" in text and "23 tests skipped" in text and "make setup" in text
    assert "slot reuse" in text and "NOT a pass" in text


def test_the_banner_says_so_at_the_start_too(monkeypatch):
    monkeypatch.setattr(conftest, "LLAMA_CPP_BUILT", False)
    reporter = Reporter("", 0)
    session = SimpleNamespace(config=SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter)))
    conftest.pytest_sessionstart(session)
    assert any("NOT TESTED" in line and markup.get("red") for line, markup in reporter.out)


def test_with_llama_cpp_built_there_is_no_banner(monkeypatch):
    out = summary(True, monkeypatch)
    assert not any("NOT TESTED" in line or line.startswith("!!!") for line, _ in out)
    reporter = Reporter("", 0)
    conftest.pytest_sessionstart(SimpleNamespace(config=SimpleNamespace(
        pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter))))
    assert reporter.out == []


def test_planted_a_summary_without_the_banner_is_caught(monkeypatch):
    monkeypatch.setattr(conftest, "missing_backend_banner", lambda skipped: [])
    with pytest.raises(AssertionError):
        test_a_run_without_llama_cpp_ends_on_a_red_banner(monkeypatch)
