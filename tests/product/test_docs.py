"""The README stays short and true: its size, its test command (the one CI runs), its
profile table against profiles/*.toml, and the links between README.md and docs/."""

import re

import pytest

from specchat.config import load_profile
from tests.support import ROOT

README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "benchmarks" / "README.md",
        ROOT / "docs" / "benchmarks" / "RESULTS.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def profile_rows() -> dict[str, str]:
    """{name: proposer cell} of the README's profile table."""
    rows = re.findall(r"^\| `([^`]+)` \| [^|]+ \| (.+) \|$", README.read_text(), flags=re.M)
    return dict(rows)


def test_the_readme_is_read_in_five_minutes():
    assert len(README.read_bytes()) <= 12 * 1024


def test_the_readme_test_command_is_what_ci_runs():
    commands = re.findall(r"^(make \w+)\s+#", README.read_text(), flags=re.M)
    assert commands == ["make run", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == "make test"


def test_the_profile_table_lists_every_shipped_profile():
    assert set(profile_rows()) == {p.stem for p in (ROOT / "profiles").glob("*.toml")}


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "profiles").glob("*.toml")))
def test_the_profile_table_says_the_profiles_proposer_and_gamma(name):
    cell = profile_rows()[name]
    spec = load_profile(str(ROOT / "profiles" / f"{name}.toml")).speculation
    method = ("ngram_draft" if cell.startswith("n-gram lookup or") else "ngram" if cell.startswith("n-gram lookup") else "hybrid" if cell.startswith("hybrid")
              else "suffix" if cell.startswith("suffix decoding")
              else "eagle3" if "EAGLE-3 head" in cell else "draft_model")
    assert spec.method == method
    gamma = re.search(r"γ = (auto|\d+)(?: \(≤ (\d+)\))?", cell)
    assert gamma, cell
    assert str(spec.num_speculative_tokens) == gamma[1]
    if gamma[2]:
        assert spec.max_speculative_tokens == int(gamma[2])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files_and_headings_that_exist(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name}: {target}"
        if anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(), flags=re.M)
            # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"{doc.name}: {target}"
