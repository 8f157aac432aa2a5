"""``specchat export FILE --format cast|md [-o OUT]``: a recording as a shareable file.

Torch-free: needs only the recording.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FORMATS = {"cast": ".cast", "md": ".md", "markdown": ".md"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "export",
        help="export a recorded session as an asciinema .cast or Markdown",
        description="Export a recorded session: asciinema v2 .cast (coloured by token provenance) "
        "or Markdown (transcript plus the session's speculation metrics).",
    )
    parser.add_argument("file", help="a recording (.jsonl), a name in the sessions dir, or 'last'")
    parser.add_argument("--format", "-f", choices=sorted(FORMATS), default="md", help="output format (default md)")
    parser.add_argument("-o", "--output", help="output file (default: next to the recording; '-' for stdout)")
    return parser


def export(ref: str, fmt: str, output: str | None) -> int:
    """Shared by ``specchat export`` and ``specchat replay --to``."""
    from specchat.sessions.export_cast import cast_lines
    from specchat.sessions.export_markdown import to_markdown
    from specchat.sessions.locate import locate
    from specchat.sessions.reader import read_recording

    recording = read_recording(locate(ref))
    text = to_markdown(recording) if FORMATS[fmt] == ".md" else "\n".join(cast_lines(recording)) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        out = Path(output) if output else recording.path.with_suffix(FORMATS[fmt])
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    if recording.damage is not None:
        print(f"warning: exported up to the damage: {recording.damage}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    from specchat.errors import SpecchatError

    try:
        return export(args.file, args.format, args.output)
    except (SpecchatError, OSError) as exc:
        print(f"specchat export: {exc}", file=sys.stderr)
        return 2
