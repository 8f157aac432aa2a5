"""``specchat demo [--script FILE] [--profile P]``: a scripted chat, hands-free, recorded like
any chat (for screen recordings); ``--headless`` prints coloured text instead of the TUI."""

from __future__ import annotations

import argparse
import sys
from specchat.commands.interrupt import signals_cancel
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

SHARED = ("profile", "no_record")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo", help="run a scripted sequence of prompts hands-free (for screen recordings)",
        description="Run a demo script (prompts as paragraphs, /pause /reset /gamma /temperature "
        "/thinking directives) against a profile. Default script: the shipped tour.")
    parser.add_argument("--script", help="the demo script (default: the shipped demos/tour.txt)")
    parser.add_argument("--headless", action="store_true", help="print to stdout instead of opening the TUI")
    return parser


def demo_loader(steps, record: bool):
    """A UI loader: the profile's live backend (recording as usual) played by the script."""
    from specchat.live import LiveLoader
    from specchat.sessions.demo import ScriptedBackend
    from specchat.ui.backend import LoadedBackend

    live = LiveLoader(record=record, quiet=True)

    def load(ref, progress) -> LoadedBackend:
        loaded = live(ref, progress)
        return LoadedBackend(ScriptedBackend(loaded.backend, steps), loaded.info)

    return load


def _headless(args: argparse.Namespace, steps) -> int:
    from specchat.sessions.ansi import render, write_stdout
    from specchat.live import load_backend
    from specchat.sessions.demo import ScriptedBackend

    colour = sys.stdout.isatty()

    def progress(event) -> None:
        if event.message:  # quotes a server's words on connecting: inert on the terminal
            print(clean_line(f"[{event.stage}] {event.message}"), file=sys.stderr)

    loaded = load_backend(args.profile, progress, record=not args.no_record)
    if loaded.info.recording:
        print(f"recording to {loaded.info.recording}", file=sys.stderr)
    demo = ScriptedBackend(loaded.backend, steps)
    try:
        with signals_cancel(demo.cancel) as caught:  # the turn is recorded as cancelled
            for event in demo.events():
                write_stdout(render(event), colour)  # after a cancel, events() ends with the turn
    finally:
        loaded.close()
    return caught.exit_code if caught.signum else 0


def run(args: argparse.Namespace) -> int:
    from specchat.sessions.demo import load_script

    try:
        steps = load_script(args.script)  # a bad script fails before any model loads
        if args.headless:
            return _headless(args, steps)
        from specchat.ui.app import run_app

        return run_app(args.profile, loader=demo_loader(steps, record=not args.no_record))
    except (SpecchatError, OSError) as exc:
        print(f"specchat demo: {exc}", file=sys.stderr)
        return 2
