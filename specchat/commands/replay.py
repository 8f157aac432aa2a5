"""``specchat replay FILE [--speed 1|2|max]``: watch a recorded session, in the TUI, as text
(``--headless``, for scripts and pipes: ``| head`` ends it quietly) or exported (``--to``). Never
imports torch, but ``--simulate`` (bench/simulate.py)."""

from __future__ import annotations

import argparse
import os
import sys

from specchat.commands.export import add_output_arguments, export
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

SHARED = ("trust_remote_code", "trust_recorded_server")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "replay", help="replay a recorded session in the TUI (no model, no torch)",
        description="Replay a recorded session with its recorded timing. FILE is a recording path, "
        "a name in the sessions dir, or 'last'.")
    parser.add_argument("file", nargs="?", help="the recording to replay ('last' for the newest)")
    parser.add_argument("--speed", help="1, 2 or max (default: 1, as recorded, in the TUI; max with --headless)")
    parser.add_argument("--headless", action="store_true", help="print the replay to stdout instead of the TUI")
    parser.add_argument("--to", choices=("cast", "markdown", "md"), help="export instead of replaying")
    add_output_arguments(parser)
    parser.add_argument("--list", action="store_true", help="list recorded sessions and exit")
    parser.add_argument("--simulate", action="store_true",
                        help="print what a model-free proposer accepts in this chat at T=0, without the model "
                             "(loads torch, not a model)")
    parser.add_argument("--method", help="with --simulate: ngram, suffix or both, comma-separated (default: the "
                                          "recorded one, else ngram)")
    parser.add_argument("--gamma", help="with --simulate: γ, a whole number or auto (default: the recorded one)")
    return parser


def _list() -> int:
    """One line per recording; a bad file is listed with its problem, never stops the list."""
    from specchat.sessions.fileformat import sessions_dir
    from specchat.sessions.history import list_sessions

    rows = list_sessions()
    if not rows:
        print(clean_line(f"no recorded sessions in {sessions_dir()}"))
    for r in rows:  # each recorded field cleaned on its own
        mal = f"{r.mean_acceptance_length:.2f}" if r.mean_acceptance_length is not None else "–"
        note = f"  [{clean_line(r.problem)}]" if r.problem else ""
        print(f"{clean_line(r.date)}  {clean_line(r.profile):<16} {r.tokens:>6} tok  MAL {mal:>5}  "
              f"{clean_line(r.path.name)}  {clean_line(r.first_prompt)[:40]!r}{note}")
    return 0


def _headless(path, speed: str) -> int:
    """The replay's event stream as text: the same ReplayBackend the TUI is driven by."""
    from specchat.sessions.ansi import banner, render, write_stdout
    from specchat.sessions.replay_backend import ReplayBackend

    backend = ReplayBackend(path, speed=speed)
    colour = sys.stdout.isatty()
    try:
        write_stdout(banner(backend.recording), colour)
        for event in backend.events():
            write_stdout(render(event), colour)
    except KeyboardInterrupt:
        backend.cancel()
        return 130
    except BrokenPipeError:  # the reader went away (| head): what it wanted, it has
        backend.cancel()
        # stdout's buffer would raise again when Python flushes it at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if backend.recording.damage is not None:
        print(clean_line(f"specchat replay: replay stopped: {backend.recording.damage}"), file=sys.stderr)
        return 1
    return 0


def _tui(path, speed: str, trust: dict) -> int:
    from specchat.live import resume_loader
    from specchat.ui.app import run_app
    from specchat.ui.backend import replay_loader

    # The history key can reopen a session (that loads its model); a replay itself never does.
    return run_app(None, loader=replay_loader(path, speed),
                   reopen=lambda p: resume_loader(p, quiet=True, **trust))


def run(args: argparse.Namespace) -> int:
    try:
        if args.list:
            return _list()
        if not args.file:
            print("specchat replay: give a recording (a path, a name, or 'last'); --list shows them", file=sys.stderr)
            return 2
        if args.to:
            return export(args.file, "md" if args.to == "markdown" else args.to, args.output, args.force)
        from specchat.sessions.locate import locate
        from specchat.sessions.replay import parse_speed

        speed = args.speed or ("max" if args.headless else "1")
        parse_speed(speed)  # a bad --speed fails before anything opens
        path = locate(args.file)
        if args.simulate:
            from specchat.commands.simulate import simulate_recording

            return simulate_recording(path, args.method, args.gamma)
        if args.headless:
            return _headless(path, speed)
        return _tui(path, speed, {name: getattr(args, name) for name in SHARED})  # the --trust-… flags
    except (SpecchatError, OSError, ValueError) as exc:
        print(clean_line(f"specchat replay: {exc}"), file=sys.stderr)
        return 2
