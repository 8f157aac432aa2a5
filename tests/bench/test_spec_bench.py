"""``--prompts spec-bench[:N]``: Spec-Bench's 480 questions as six category sets, N per
category picked by a fixed rule, the shipped file the one SOURCE.md names, and bad N
refused in one line before any model loads."""

import hashlib
import re

import pytest

from specchat.bench.prompt_sets import SHIPPED_SETS, load_prompt_sets
from specchat.bench.spec_bench import MT_BENCH, QUESTIONS
from specchat.errors import SpecchatError

NAMES = ["spec-bench/mt-bench", "spec-bench/translation", "spec-bench/summarization", "spec-bench/qa",
         "spec-bench/math_reasoning", "spec-bench/rag"]
BAD = [("spec-bench:0", "at least 1"), ("spec-bench:-1", "at least 1"), ("spec-bench:x", "not a whole number"),
       ("spec-bench:", "not a whole number"), ("spec-bench:2.5", "not a whole number"),
       ("spec-bench:81", "at most 80")]


def ids(spec: str) -> dict[str, list[str]]:
    return {s.name: [p.id for p in s.prompts] for s in load_prompt_sets([spec])}


def test_all_of_spec_bench_is_six_sets_of_80():
    sets = load_prompt_sets(["spec-bench"])
    assert [s.name for s in sets] == NAMES
    assert [len(s.prompts) for s in sets] == [80] * 6
    assert all(s.max_new_tokens == 256 for s in sets)  # Spec-Bench uses 1024; --max-new-tokens overrides
    every = [p.id for s in sets for p in s.prompts]
    assert len(set(every)) == 480
    mt_bench = sets[0].prompts
    assert [p.id for p in mt_bench] == [str(i) for i in range(81, 161)]
    assert {c: sum(p.category == c for p in mt_bench) for c in MT_BENCH} == {c: 10 for c in MT_BENCH}


@pytest.mark.parametrize("n", [1, 3, 10, 80])
def test_n_per_category(n):
    sets = load_prompt_sets([f"spec-bench:{n}"])
    assert [s.name for s in sets] == NAMES
    assert [len(s.prompts) for s in sets] == [n] * 6
    assert all(f"{n} of 80 questions" in s.description for s in sets)


@pytest.mark.parametrize("n", [1, 3, 10, 80])
def test_one_turn_categories_are_evenly_spaced_by_index(n):
    everything, picked = ids("spec-bench"), ids(f"spec-bench:{n}")
    for name in NAMES[1:]:
        assert picked[name] == [everything[name][i * 80 // n] for i in range(n)]
    assert ids(f"spec-bench:{n}") == picked  # the same N names the same questions


def test_mt_bench_shares_n_over_its_sub_categories():
    def categories(n):
        return [p.category for p in load_prompt_sets([f"spec-bench:{n}"])[0].prompts]

    assert categories(1) == ["writing"]
    assert categories(8) == list(MT_BENCH)
    assert categories(10) == ["writing", "writing", "roleplay", "roleplay", *MT_BENCH[2:]]
    assert ids("spec-bench:10")["spec-bench/mt-bench"] == ["81", "86", "91", "96", "101", "111", "121", "131",
                                                           "141", "151"]
    assert set(categories(3)) == {"writing", "roleplay", "reasoning"}


def test_both_turns_are_kept_and_text_is_the_first():
    mt_bench, *one_turn = load_prompt_sets(["spec-bench"])
    for prompt in mt_bench.prompts:
        assert len(prompt.turns) == 2 and prompt.text == prompt.turns[0] and all(t.strip() for t in prompt.turns)
    assert mt_bench.prompts[0].turns[1] == "Rewrite your previous response. Start every sentence with the letter A."
    assert all(p.turns == () and p.text.strip() for s in one_turn for p in s.prompts)
    assert one_turn[0].prompts[0].text.startswith("Translate German to English: ")


def test_the_shipped_file_is_the_one_source_md_names():
    folder = QUESTIONS.parent
    (named,) = re.findall(r"sha256\(question\.jsonl\): ([0-9a-f]{64})", (folder / "SOURCE.md").read_text())
    assert hashlib.sha256(QUESTIONS.read_bytes()).hexdigest() == named
    assert "fd2c1cd7d2201ef71db4c5f4e455008f017967bf" in (folder / "SOURCE.md").read_text()
    assert (folder / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_all_stays_the_four_shipped_sets_and_spec_bench_mixes_with_them():
    assert [s.name for s in load_prompt_sets(["all"])] == list(SHIPPED_SETS)
    assert [s.name for s in load_prompt_sets(["open", "spec-bench:1"])] == ["open", *NAMES]
    with pytest.raises(SpecchatError, match="'spec-bench/mt-bench' is given twice"):
        load_prompt_sets(["spec-bench:1", "spec-bench:2"])


@pytest.mark.parametrize("n", ["", ":3", ":10"])
def test_one_category_alone_is_the_same_questions_as_in_the_whole_run(n):
    whole = ids(f"spec-bench{n}")
    for name in NAMES:
        assert ids(f"{name}{n}") == {name: whole[name]}
    assert [s.name for s in load_prompt_sets(["spec-bench/qa:2", "spec-bench/rag:2"])] == [NAMES[3], NAMES[5]]


def test_an_unknown_category_is_one_line_naming_it_and_the_six():
    with pytest.raises(SpecchatError) as info:
        load_prompt_sets(["spec-bench/chat:3"])
    line = str(info.value)
    assert "\n" not in line and "'chat' is not a Spec-Bench category" in line
    assert all(name.split("/")[1] in line for name in NAMES)
    with pytest.raises(SpecchatError, match="at most 80"):
        load_prompt_sets(["spec-bench/qa:81"])


@pytest.mark.parametrize("spec, fragment", BAD)
def test_a_bad_n_is_one_line_naming_the_value_and_the_fix(spec, fragment):
    with pytest.raises(SpecchatError) as info:
        load_prompt_sets([spec])
    line = str(info.value)
    assert "\n" not in line and info.value.key == "--prompts"
    assert f"--prompts {spec!r}" in line and fragment in line
    assert "use spec-bench:N with N from 1 to 80" in line


@pytest.mark.parametrize("spec, fragment", BAD)
def test_the_cli_refuses_a_bad_n_before_loading_a_model(capsys, spec, fragment):
    from specchat.cli import main

    assert main(["bench", "--prompts", spec, "--no-peer"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("specchat: error: ")
    assert spec in err and fragment in err and "from 1 to 80" in err


def test_mt_bench_runs_its_second_turn_as_the_next_turn_of_the_same_chat(tiny_ngram_profile_path, tmp_path):
    """On the tiny model, spec-bench:1's MT-bench question (81) runs both turns under each
    configuration: the second turn's prompt is the first's with the model's own reply and
    the follow-up after it, the KV of that prefix is kept (its first step reuses it), and its
    rows are reported as a set of their own. Planted bug: a second turn that starts from an
    empty cache (``fresh`` left True) fails the reuse check."""
    import json

    from specchat.cli import main

    out = tmp_path / "o"
    assert main(["bench", "--profile", str(tiny_ngram_profile_path), "--prompts", "spec-bench:1", "--methods",
                 "ngram,none", "--gamma", "3", "--max-new-tokens", "6", "--no-peer", "--no-warmup",
                 "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    rows = {(r["set"], r["config"]): r for r in results["rows"]}
    assert "spec-bench/mt-bench/turn-2" in results["aggregates"]["sets"]
    assert "spec-bench/mt-bench/turn-2" in results["prompt_sets"]
    for config in ("none", "ngram γ=3"):
        first, second = rows[("spec-bench/mt-bench", config)], rows[("spec-bench/mt-bench/turn-2", config)]
        assert second["prompt_id"] == first["prompt_id"] == "81"
        assert second["prompt_tokens"] > first["prompt_tokens"] + first["new_tokens"]
        assert second["steps"][0]["reused_tokens"] >= first["prompt_tokens"] - 1
