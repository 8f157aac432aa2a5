"""The bad-profile matrix: each mistake gives one line naming file, key and fix; exit 2.

The matrix calls the CLI's main in this process (in_process: the same exit code and
stderr, without a fresh interpreter per case); the cycle, the missing file and the TUI's
unknown name run the real CLI in a subprocess, as the user runs it.
"""

from __future__ import annotations

import pytest

from tests.support.cli import assert_one_line_error, in_process, run_cli

# (file name, TOML text, fragments the one-line message must contain)
CASES = [
    ("misspelt-key", 'extends = "default"\n[sampling]\ntemprature = 0.5\n',
     ["key 'sampling.temprature' is unknown", "(line 3)", "did you mean 'temperature'?"]),
    ("misspelt-table", 'extends = "default"\n[sampeling]\ntop_k = 5\n',
     ["key 'sampeling' is unknown", "(line 2)", "did you mean 'sampling'?"]),
    ("string-for-number", 'extends = "default"\n[sampling]\ntemperature = "hot"\n',
     ["key 'sampling.temperature' must be a number", "(line 3)", "without quotes"]),
    ("quoted-bool", 'extends = "default"\n[chat]\nenable_thinking = "yes"\n',
     ["key 'chat.enable_thinking' must be true or false", "(line 3)"]),
    ("bad-enum", 'extends = "default"\n[target]\ndtype = "bfloat61"\n',
     ["key 'target.dtype' has bad value 'bfloat61'", "(line 3)", "did you mean 'bfloat16'?"]),
    ("bad-method", 'extends = "default"\n[speculation]\nmethod = "lookahead"\n',
     ["key 'speculation.method' has bad value 'lookahead'", "draft_model", "ngram"]),
    ("medusa-without-head", 'extends = "default"\n[speculation]\nmethod = "medusa"\n',
     ["method 'medusa' needs a head", "Medusa-1 head's config.json"]),
    ("negative-temperature", 'extends = "default"\n[sampling]\ntemperature = -1\n',
     ["key 'sampling.temperature' has bad value -1", "must be ≥ 0"]),
    ("infinite-temperature", 'extends = "default"\n[sampling]\ntemperature = inf\n',
     ["key 'sampling.temperature' has bad value inf", "must be ≥ 0 and finite"]),
    ("nan-temperature", 'extends = "default"\n[sampling]\ntemperature = nan\n',
     ["key 'sampling.temperature' has bad value nan", "must be ≥ 0 and finite"]),
    ("negative-seed", 'extends = "default"\n[sampling]\nseed = -1\n',
     ["key 'sampling.seed' has bad value -1", "between 0 and 18446744073709551615"]),
    ("top-p-zero", 'extends = "default"\n[sampling]\ntop_p = 0\n',
     ["key 'sampling.top_p' has bad value 0", "> 0 and ≤ 1"]),
    ("gamma-too-big", 'extends = "default"\n[speculation]\nnum_speculative_tokens = 40\n',
     ["key 'speculation.num_speculative_tokens' has bad value 40", "between 1 and 16"]),
    ("gamma-word", 'extends = "default"\n[speculation]\nnum_speculative_tokens = "many"\n',
     ["num_speculative_tokens' has bad value 'many'", '"auto"']),
    ("lookup-min-over-max", 'extends = "default"\n[speculation]\nprompt_lookup_min = 4\nprompt_lookup_max = 2\n',
     ["prompt_lookup_min (4) is larger than prompt_lookup_max (2)", "(line 3)", "make prompt_lookup_min ≤"]),
    ("draft-missing", 'extends = "default"\n[speculation]\nmethod = "draft_model"\n',
     ["method 'draft_model' needs a draft model", "[speculation.draft]"]),
    ("toml-syntax", '[target\nsource = "x"\n',
     ["TOML syntax error", "(line 1)", "check quotes, brackets"]),
    ("extends-typo", 'extends = "defualt"\n',
     ["'extends' names unknown profile 'defualt'", "did you mean 'default'?"]),
    ("no-target", 'description = "nothing to load"\n',
     ["key 'target.source' is missing", 'extends = "default"']),
    ("bad-device", 'extends = "default"\n[target]\ndevice = "gpu"\n',
     ["key 'target.device' has bad value 'gpu'", "'cuda:N'"]),
    ("store-keyword-capitalised", 'extends = "default"\n[speculation]\nmethod = "suffix"\nsuffix_store = "Off"\n',
     ["key 'speculation.suffix_store' has bad value 'Off'", "(line 4)", 'did you mean "off"?', '"./Off"']),
    ("bool-for-number", 'extends = "default"\n[sampling]\ntemperature = true\n',
     ["key 'sampling.temperature' must be a number, not a boolean (true)"]),
    ("value-nested-deep", 'extends = "default"\n[sampling]\ntemperature = ' + "[" * 300 + "]" * 300 + "\n",
     ["key 'sampling.temperature' must be a number, not an array ([[[", "[…) (line 3)"]),
    ("number-of-3000-digits", 'extends = "default"\n[sampling]\nseed = ' + "9" * 3000 + "\n",
     ["key 'sampling.seed' has bad value 9999", "9…"]),
    ("draft-not-a-table", 'extends = "default"\n[speculation]\ndraft = "Qwen/Qwen3-0.6B"\n',
     ["'speculation.draft' must be a table", "[speculation.draft] section"]),
]


def assert_names_the_file(result, fragments: list[str], file_name: str) -> None:
    line = assert_one_line_error(result, file_name, *fragments)
    assert line.startswith("specchat: error: ")
    assert len(line) < 600, f"{len(line)} characters: a value is quoted whole"


@pytest.mark.parametrize("name,text,fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_profile_gives_one_line_and_exit_2(tmp_path, name, text, fragments):
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    assert_names_the_file(in_process("profiles", "check", str(path)), fragments, f"{name}.toml")


def test_extends_cycle(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    assert_names_the_file(run_cli("profiles", "check", str(tmp_path / "a.toml")),
                          ["'extends' forms a cycle (a → b → a)"], "a.toml")


def test_a_path_that_is_there_but_no_file_is_not_called_missing(tmp_path):
    import os

    loop = tmp_path / "loop.toml"
    os.symlink(loop, loop)  # a link to itself
    for path, name in (("/dev/null", "/dev/null"), (str(loop), "loop.toml")):
        assert_names_the_file(in_process("profiles", "check", path), ["is not a regular file"], name)


def test_missing_file_and_unknown_name_via_run_and_tui(tmp_path):
    missing = tmp_path / "nope.toml"
    assert_names_the_file(run_cli("run", "--profile", str(missing), "--prompt", "hi"),
                          ["profile file not found"], "nope.toml")
    result = run_cli("--profile", "smollm2-drafts")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "unknown profile 'smollm2-drafts'" in result.stderr and "did you mean 'smollm2-draft'?" in result.stderr


def test_bad_profile_fails_run_before_any_model_loads(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(CASES[0][1])
    assert_names_the_file(run_cli("run", "--profile", str(path), "--prompt", "hi", "--json"), CASES[0][2], "bad.toml")
