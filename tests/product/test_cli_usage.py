"""Usage errors, as a tester typed them: each is one line naming the (sub)command, the flag
and the fix, exit status 2, never argparse's usage block; and options given before a
subcommand (``specchat --profile P run``) apply to it or are refused, never dropped.

main runs in this process (tests/support/cli.py's ``in_process``); none of these gets as
far as loading a model, but naming specchat.cli gives them the 'model' tier."""

from __future__ import annotations

import pytest

import specchat.commands.bench as bench_command
import specchat.commands.demo as demo_command
import specchat.commands.replay as replay_command
import specchat.commands.run as run_command
from specchat.cli import SHARED_OPTIONS, build_parser
from specchat.sessions.recorder import Recorder, build_header
from tests.support.cli import assert_one_line_error, in_process
from tests.support.sessions_helpers import sample_events


@pytest.mark.parametrize("args, prog, words", [
    (["bench", "--max-new-tokens", "abc"], "specchat bench", ["argument --max-new-tokens: invalid int value: 'abc'"]),
    (["bench", "--max-new-tokens=1.5"], "specchat bench", ["argument --max-new-tokens: invalid int value: '1.5'"]),
    (["bench", "--prompts"], "specchat bench", ["argument --prompts: expected at least one argument"]),
    (["run", "hi"], "specchat run", ["the following arguments are required: --prompt"]),
    (["run", "--prompt", "hi", "stray"], "specchat run", ["unrecognized arguments: stray"]),  # the subcommand's, named
    (["profiles", "show"], "specchat profiles show", ["required: name"]),  # a nested subcommand's parser too
    (["warp"], "specchat", ["argument COMMAND: invalid choice: 'warp'"]),
    (["--no-such-flag"], "specchat", ["unrecognized arguments: --no-such-flag"]),
])
def test_a_usage_error_is_one_line_naming_the_subcommand_and_its_help(args, prog, words):
    line = assert_one_line_error(in_process(*args), *words)
    assert line.startswith(f"{prog}: error: ") and line.endswith(f"({prog} --help lists the options)"), line


def test_a_typed_escape_sequence_is_shown_inert():
    # argparse quotes most values with repr(); unrecognized arguments it quotes as typed
    line = assert_one_line_error(in_process("run", "--prompt", "hi", "\x1b]0;owned\x07\x1b[31mred"),
                                 "specchat run: error: unrecognized arguments:")
    assert "\x1b" not in line and "\x07" not in line


def test_help_still_shows_the_usage_block_and_the_options():
    result = in_process("bench", "--help")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: specchat bench [-h] [-p NAME|PATH]")
    assert "--max-new-tokens N" in result.stdout and "options:" in result.stdout


@pytest.fixture
def ran(monkeypatch) -> dict:
    """run, bench, demo and replay replaced by a stand-in keeping the arguments they got."""
    got = {}

    def stand_in(name):
        return lambda args: got.update({name: args}) or 0

    for module in (run_command, bench_command, demo_command, replay_command):
        monkeypatch.setattr(module, "run", stand_in(module.__name__.rsplit(".", 1)[1]))
    return got


@pytest.mark.parametrize("args, command, profile", [
    (["--profile", "mine.toml", "run", "--prompt", "hi"], "run", "mine.toml"),
    (["-p", "mine", "bench"], "bench", "mine"),
    (["--profile", "mine", "demo"], "demo", "mine"),
    (["run", "-p", "mine", "--prompt", "hi"], "run", "mine"),
    (["--profile", "mine", "run", "--profile", "mine", "--prompt", "hi"], "run", "mine"),  # the same one twice
    (["run", "--prompt", "hi"], "run", "default"),  # neither: the subcommand's own default
    (["bench"], "bench", "default"),
    (["demo"], "demo", "default"),
])
def test_the_profile_given_before_a_subcommand_is_the_subcommands(ran, args, command, profile):
    result = in_process(*args)
    assert result.returncode == 0, result.stderr
    assert ran[command].profile == profile


def test_a_missing_profile_given_before_the_subcommand_is_one_line(tmp_path):
    missing = str(tmp_path / "nope.toml")
    # were it dropped, the default profile would load and the bad value after it be the error
    assert_one_line_error(in_process("--profile", missing, "run", "--prompt", "hi", "--max-new-tokens", "0"),
                          "specchat: error:", missing, "profile file not found")
    assert_one_line_error(in_process("--profile", missing, "bench", "--gamma", "99"),
                          "specchat: error:", missing, "profile file not found")


def test_two_different_profiles_are_refused(ran):
    assert_one_line_error(in_process("--profile", "a", "run", "-p", "b", "--prompt", "hi"),
                          "--profile given twice", "'a'", "'b'", "give it once")
    assert ran == {}


@pytest.mark.parametrize("command", [["replay", "x.jsonl"], ["export", "x.jsonl"], ["profiles", "list"]])
def test_a_profile_before_a_subcommand_that_takes_none_is_refused(ran, command):
    assert_one_line_error(in_process("--profile", "mine", *command),
                          f"'specchat {command[0]}' takes no --profile", "--profile 'mine'", "drop --profile")
    assert ran == {}


def test_the_other_options_before_a_subcommand_apply_or_are_refused(ran):
    assert in_process("--no-record", "run", "--prompt", "hi").returncode == 0 and ran["run"].no_record
    assert in_process("--trust-remote-code", "--trust-recorded-server", "replay", "x.jsonl").returncode == 0
    assert ran["replay"].trust_remote_code and ran["replay"].trust_recorded_server
    assert_one_line_error(in_process("--no-record", "bench"), "'specchat bench' takes no --no-record")
    assert_one_line_error(in_process("--resume", "last", "run", "--prompt", "hi"),
                          "--resume 'last' before 'run' reopens a chat in the TUI", "without a subcommand")
    assert "bench" not in ran


# each command with the arguments it requires, parsed by the real parser (no stand-in: none gets to run)
COMMANDS = {name: sub for action in build_parser()._actions if action.dest == "command"
            for name, sub in action.choices.items()}
REQUIRED = {"run": ["--prompt", "hi"], "export": ["x.jsonl"]}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_takes_the_shared_options_its_module_declares_and_refuses_the_others(name):
    declared = COMMANDS[name].get_default("_shared")
    for option in SHARED_OPTIONS:
        flag = "--" + option.replace("_", "-")
        assert (flag in COMMANDS[name].format_help()) == (option in declared), (name, flag)
        if option not in declared:  # given before the command: refused in one line, never dropped
            value = ["mine"] if option == "profile" else []
            assert_one_line_error(in_process(flag, *value, name, *REQUIRED.get(name, [])),
                                  f"'specchat {name}' takes no {flag}", f"drop {flag}")


def test_empty_methods_are_refused_as_a_lone_comma_is(tmp_path):
    missing = str(tmp_path / "no-such-set.toml")  # were "" taken as the default, this would be the error
    for methods in (",", ""):
        assert_one_line_error(in_process("bench", "--methods", methods, "--prompts", missing),
                              "--methods value '' is not valid", "use a comma-separated list of")


def test_an_empty_simulate_method_is_refused_as_a_lone_comma_is(tmp_path):
    recording = tmp_path / "chat.jsonl"
    with Recorder(recording) as recorder:
        recorder.start(build_header({"name": "tiny"}))
        for event in sample_events():
            recorder.record(event)
    for method in (",", ""):
        assert_one_line_error(in_process("replay", str(recording), "--simulate", "--method", method),
                              "--method '' is not a model-free proposer")


def test_an_empty_verify_prompt_is_refused_not_swapped_for_the_default(tmp_path):
    for prompt in ("", "  "):  # checked before the profile loads: the missing file is never reached
        assert_one_line_error(in_process("verify", "--profile", str(tmp_path / "none.toml"), "--prompt", prompt),
                              "--prompt is empty", "leave --prompt out")
