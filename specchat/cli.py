"""The ``specchat`` command line. Heavy libraries are imported by the subcommand that needs them,
so ``specchat --help`` answers at once; every SpecchatError and usage error ends the program in
one line, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace
from typing import NoReturn

from . import __version__
from .config import DEFAULT_PROFILE, load_profile
from .errors import SpecchatError
from .sanitize import clean_line

EXAMPLES = """\
examples:
  specchat                                  chat in the TUI with the default profile
                                            (embedded SmolLM2-135M, n-gram speculation, CPU)
  specchat --profile smollm2-draft          chat using a draft model
  specchat --profile ./my-profile.toml      a profile file of your own
  specchat --resume last                    reopen the newest recorded chat and carry on
  specchat --no-record                      chat without recording the session
  specchat run --prompt "Explain KV caches" one reply on stdout, coloured by provenance
  specchat run --json --prompt "Hi"         JSON lines: one per token, then a summary
  specchat profiles list                    the shipped and user profiles
  specchat profiles show qwen3-8b           a profile after 'extends' is applied
  specchat profiles check my.toml           validate profile files (exit 2 on errors)

token colours: accepted draft (green), resampled after a rejection (yellow),
bonus token (cyan), plain target sample (default colour).
"""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the (sub)command and where its
    options are listed, not the whole usage block: ``specchat bench: error: argument
    --max-new-tokens: invalid int value: 'abc' (specchat bench --help lists the options)``.
    Exit status 2, as argparse's own. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        # the message quotes what was typed, escape sequences and all: cleaned like any untrusted text
        self.exit(2, clean_line(f"{self.prog}: error: {message} ({self.prog} --help lists the options)") + "\n")


# The options that subcommands share, by dest (its flag: --dest-with-dashes). A command module's SHARED names
# those it takes: cli adds them to its parser, and refuses the others given before it (_before_the_command).
SHARED_OPTIONS = {
    "profile": {"metavar": "NAME|PATH", "help": "profile (default: default)"},
    "no_record": {"action": "store_true", "help": "do not record this chat"},
    "trust_remote_code": {"action": "store_true", "help": "let a chat reopened from a recording run its profile's "
                          "trust_remote_code = true (the model repo's own Python code)"},
    "trust_recorded_server": {"action": "store_true", "help": "let a chat reopened from a recording connect to the "
                              "server its profile names, sending the variable it names as the key"},
}
FLAGS = tuple(SHARED_OPTIONS)[1:]  # after the profile in every usage line


def _add_shared(parser: argparse.ArgumentParser, *names: str, prefix: str = "") -> argparse.ArgumentParser:
    for name in names:
        short = ("-p",) if name == "profile" else ()
        parser.add_argument(*short, "--" + name.replace("_", "-"), dest=prefix + name, **SHARED_OPTIONS[name])
    return parser


def build_parser() -> argparse.ArgumentParser:
    from .commands import available_commands

    parser = OneLineParser(prog="specchat", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Terminal chat with a local LLM and exact speculative decoding, "
                                       "showing live whether speculation pays.")
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    # the TUI's, and a subcommand's given before it: dests tui_…, which a subcommand's cannot overwrite
    _add_shared(parser, "profile", prefix="tui_")
    parser.add_argument("--resume", dest="tui_resume", metavar="FILE",
                        help="reopen a recorded chat (a path, a name in the sessions dir, or 'last') and carry on")
    _add_shared(parser, *FLAGS, prefix="tui_")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for module in available_commands():
        def add_parser(*names, shared=module.SHARED, **kwargs):  # -p first, as in every usage line
            return _add_shared(subparsers.add_parser(*names, **kwargs), *set(shared) & {"profile"})
        sub = module.add_parser(SimpleNamespace(add_parser=add_parser))
        _add_shared(sub, *(name for name in FLAGS if name in module.SHARED))
        sub.set_defaults(_run=module.run, _parser=sub, _shared=module.SHARED)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # words after a subcommand that it does not take: its usage error, naming it
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command is None:
            return open_tui(args.tui_profile, resume=args.tui_resume, record=not args.tui_no_record,
                            trust={name: getattr(args, f"tui_{name}") for name in FLAGS if name.startswith("trust")})
        _before_the_command(args)
        return args._run(args)
    except SpecchatError as error:
        print(f"specchat: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `specchat run ... | head`
        return 0


def _before_the_command(args: argparse.Namespace) -> None:
    """Options given before a subcommand (``specchat --profile P run …``) apply to it where its
    module's SHARED declares them, and are refused in one line where it does not: never dropped
    in silence. A profile given neither way is the default one."""
    command = f"specchat {args.command}"
    if args.tui_resume is not None:  # no subcommand reopens a chat (train-head's own --resume carries on training)
        raise SpecchatError(f"--resume '{args.tui_resume}' before '{args.command}' reopens a chat in the TUI, which "
                            f"'{command}' does not open", key="--resume", hint="give --resume without a subcommand")
    for name in SHARED_OPTIONS:
        top, option = getattr(args, f"tui_{name}"), "--" + name.replace("_", "-")
        if name not in args._shared:
            if top not in (None, False):  # replay and export read the profile a recording carries
                given = f"{option} '{top}'" if isinstance(top, str) else option
                raise SpecchatError(f"'{command}' takes no {option}, but {given} was given before it", key=option,
                                    hint=f"drop {option} ('{command} --help' lists the options)")
        elif getattr(args, name) in (None, False):  # not given after the command: the one before, or the default
            setattr(args, name, DEFAULT_PROFILE if top is None else top)
        elif top not in (None, False, getattr(args, name)):
            raise SpecchatError(f"{option} given twice: '{top}' before '{args.command}' and '{getattr(args, name)}' "
                                f"after it", key=option, hint="give it once")


def open_tui(profile: str | None, *, resume: str | None = None, record: bool = True, trust: dict) -> int:
    """The TUI on a profile, or carrying on a recorded chat. The profile and the
    recording are checked first, so a bad one fails here in one line."""
    if profile is not None or resume is None:
        load_profile(profile or DEFAULT_PROFILE)
    try:
        from .ui.app import run_app
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("specchat.ui"):
            raise SpecchatError("the TUI is not available in this build", hint="use `specchat run --prompt TEXT`") from None
        raise SpecchatError(f"the TUI needs the '{error.name}' package", hint="pip install textual") from None
    from .live import LiveLoader, resume_loader

    # --resume without --profile: the profile the recording carries (as data)
    loader = (resume_loader(resume, profile, record=record, quiet=True, **trust)
              if resume else LiveLoader(record=record, quiet=True))
    return run_app(profile if resume else profile or DEFAULT_PROFILE, loader=loader,
                   reopen=lambda path: resume_loader(path, record=record, quiet=True, **trust))  # the history screen's


if __name__ == "__main__":
    sys.exit(main())
