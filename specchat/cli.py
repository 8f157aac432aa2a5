"""The ``specchat`` command line.

Heavy libraries (torch, transformers, textual) are imported inside the subcommand
that needs them, so ``specchat --help`` and ``specchat profiles`` answer at once.
Every SpecchatError ends the program with its one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import SpecchatError

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


def build_parser() -> argparse.ArgumentParser:
    from .commands import available_commands

    parser = argparse.ArgumentParser(
        prog="specchat",
        description="Terminal chat with a local LLM and exact speculative decoding, "
        "showing live whether speculation pays.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    parser.add_argument("-p", "--profile", dest="tui_profile", metavar="NAME|PATH",
                        help="profile for the TUI (default: 'default')")
    parser.add_argument("--resume", metavar="FILE",
                        help="reopen a recorded chat (a path, a name in the sessions dir, or 'last') and carry on")
    parser.add_argument("--no-record", action="store_true", help="do not record this chat")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let --resume run a recorded profile's trust_remote_code = true (the model repo's own "
                             "Python code); never taken from a recording otherwise")
    parser.add_argument("--trust-recorded-server", action="store_true",
                        help="let --resume connect to the server a recorded profile names, sending the variable it "
                             "names as the key; otherwise refused before any request")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in available_commands():
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for name in set(subparsers.choices) - before:
            subparsers.choices[name].set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            return open_tui(args.tui_profile, resume=args.resume, record=not args.no_record,
                            trust_remote_code=args.trust_remote_code,
                            trust_recorded_server=args.trust_recorded_server)
        return args._run(args)
    except SpecchatError as error:
        print(f"specchat: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `specchat run ... | head`
        return 0


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
