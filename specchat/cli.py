"""The ``specchat`` command line.

Heavy libraries (torch, transformers, textual) are imported inside the subcommand
that needs them, so ``specchat --help`` and ``specchat profiles`` answer at once.
Every SpecchatError ends the program with its one-line message and exit code 2, and so
does every usage error argparse finds (OneLineParser).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from . import __version__
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


def build_parser() -> argparse.ArgumentParser:
    from .commands import available_commands

    parser = OneLineParser(
        prog="specchat",
        description="Terminal chat with a local LLM and exact speculative decoding, "
        "showing live whether speculation pays.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    # dests of their own (tui_…): a subcommand's option of the same dest would overwrite the
    # value given here in the namespace, and _before_the_command could not see it
    parser.add_argument("-p", "--profile", dest="tui_profile", metavar="NAME|PATH",
                        help="profile for the TUI (default: 'default')")
    parser.add_argument("--resume", dest="tui_resume", metavar="FILE",
                        help="reopen a recorded chat (a path, a name in the sessions dir, or 'last') and carry on")
    parser.add_argument("--no-record", dest="tui_no_record", action="store_true", help="do not record this chat")
    parser.add_argument("--trust-remote-code", dest="tui_trust_remote_code", action="store_true",
                        help="let --resume run a recorded profile's trust_remote_code = true (the model repo's own "
                             "Python code); never taken from a recording otherwise")
    parser.add_argument("--trust-recorded-server", dest="tui_trust_recorded_server", action="store_true",
                        help="let --resume connect to the server a recorded profile names, sending the variable it "
                             "names as the key; otherwise refused before any request")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for module in available_commands():
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for name in set(subparsers.choices) - before:
            sub = subparsers.choices[name]
            # A subcommand's own -p/--profile parses to None when not given (its default kept
            # aside), so that one given before the subcommand can take its place.
            profile_default = sub.get_default("profile")
            sub.set_defaults(_run=module.run, _parser=sub, _profile_default=profile_default)
            if profile_default is not None:
                sub.set_defaults(profile=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # words after a subcommand that it does not take: its usage error, naming it
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command is None:
            return open_tui(args.tui_profile, resume=args.tui_resume, record=not args.tui_no_record,
                            trust_remote_code=args.tui_trust_remote_code,
                            trust_recorded_server=args.tui_trust_recorded_server)
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
    """Options given before a subcommand (``specchat --profile P run …``) apply to it where
    it takes the same option, and are refused in one line where it does not: never dropped
    in silence. A subcommand takes an option when its parse left that attribute in ``args``."""
    command = f"specchat {args.command}"
    if args.tui_resume is not None:  # no subcommand reopens a chat (train-head's own --resume carries on training)
        raise SpecchatError(f"--resume '{args.tui_resume}' before '{args.command}' reopens a chat in the TUI, "
                            f"which '{command}' does not open", key="--resume",
                            hint="give --resume without a subcommand")
    for flag in ("no_record", "trust_remote_code", "trust_recorded_server"):
        if getattr(args, f"tui_{flag}"):
            option = "--" + flag.replace("_", "-")
            if not hasattr(args, flag):
                raise SpecchatError(f"'{command}' takes no {option}", key=option,
                                    hint=f"drop {option} ('{command} --help' lists the options)")
            setattr(args, flag, True)
    top = args.tui_profile
    if not hasattr(args, "profile"):
        if top is not None:  # replay and export read the profile a recording carries; profiles names its own
            raise SpecchatError(f"'{command}' takes no profile, but --profile '{top}' was given before it",
                                key="--profile", hint="drop --profile")
    elif args.profile is None:
        args.profile = top if top is not None else args._profile_default
    elif top is not None and top != args.profile:
        raise SpecchatError(f"--profile given twice: '{top}' before '{args.command}' and '{args.profile}' after it",
                            key="--profile", hint="give it once")


def open_tui(profile: str | None, *, resume: str | None = None, record: bool = True,
             trust_remote_code: bool = False, trust_recorded_server: bool = False) -> int:
    """The TUI on a profile, or carrying on a recorded chat. The profile and the
    recording are checked first, so a bad one fails here in one line."""
    from .config import DEFAULT_PROFILE, load_profile

    if profile is not None or resume is None:
        load_profile(profile or DEFAULT_PROFILE)
    try:
        from .ui.app import run_app
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("specchat.ui"):
            raise SpecchatError("the TUI is not available in this build", hint="use `specchat run --prompt TEXT`") from None
        raise SpecchatError(f"the TUI needs the '{error.name}' package", hint="pip install textual") from None
    from .live import LiveLoader, resume_loader

    trust = {"trust_remote_code": trust_remote_code, "trust_recorded_server": trust_recorded_server}

    def reopen(path):  # the history screen's "reopen"
        return resume_loader(path, record=record, quiet=True, **trust)

    # --resume without --profile: the profile the recording carries (as data)
    loader = (resume_loader(resume, profile, record=record, quiet=True, **trust)
              if resume else LiveLoader(record=record, quiet=True))
    return run_app(profile if resume else profile or DEFAULT_PROFILE, loader=loader, reopen=reopen)


if __name__ == "__main__":
    sys.exit(main())
