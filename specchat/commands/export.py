"""``specchat export FILE --format cast|md [-o OUT] [--force]``: a recording as a shareable file
(torch-free; sessions/private_files.py says what it never writes over)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

FORMATS = {"cast": ".cast", "md": ".md", "markdown": ".md"}
SHARED = ()


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "export", help="export a recorded session as an asciinema .cast or Markdown",
        description="Export a recorded session: asciinema v2 .cast (coloured by token provenance) "
        "or Markdown (transcript plus the session's speculation metrics).")
    parser.add_argument("file", help="a recording (.jsonl), a name in the sessions dir, or 'last'")
    parser.add_argument("--format", "-f", choices=sorted(FORMATS), default="md", help="output format (default md)")
    add_output_arguments(parser)
    return parser


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """-o and --force, shared with ``specchat replay --to``."""
    parser.add_argument("-o", "--output", help="output file (default: next to the recording; '-' for stdout)")
    parser.add_argument("--force", action="store_true", help="replace the output file if it exists")


def export(ref: str, fmt: str, output: str | None, force: bool = False) -> int:
    """Shared by ``specchat export`` and ``specchat replay --to``."""
    from specchat.sessions.export_cast import cast_text
    from specchat.sessions.export_markdown import to_markdown
    from specchat.sessions.locate import locate
    from specchat.sessions.private_files import write_export
    from specchat.sessions.reader import read_recording

    recording = read_recording(locate(ref))
    text = to_markdown(recording) if FORMATS[fmt] == ".md" else cast_text(recording)
    if output == "-":
        sys.stdout.write(text)
    else:
        # by default next to the recording, never over it (a recording named chat.md exports to chat.md.md)
        beside = recording.path.with_suffix(FORMATS[fmt])
        if beside == recording.path:
            beside = recording.path.with_name(recording.path.name + FORMATS[fmt])
        out = Path(output) if output else beside
        write_export(out, text, source=recording.path, force=force)
        print(clean_line(f"wrote {out}"))
    if recording.damage is not None:
        print(clean_line(f"warning: exported up to the damage: {recording.damage}"), file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return export(args.file, args.format, args.output, args.force)
    except (SpecchatError, OSError) as exc:
        print(clean_line(f"specchat export: {exc}"), file=sys.stderr)
        return 2
