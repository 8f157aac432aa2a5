"""``specchat doctor [--profile P] [--smoke]``: can this machine run the profile? One line per
check (ok / warning / fail with its fix); exit 1 on any failure, warnings do not fail."""

from __future__ import annotations

import argparse
import sys

SHARED = ("profile",)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor", help="check that this machine can run a profile (one line per check; exit 1 on a failure)",
        description="Check Python, torch, CUDA/MPS and the CPU's features, bitsandbytes, the llama-cpp-python "
                    "build, the profile's models (on disk, never downloaded) and the memory they need, and the "
                    "data dir. Exit 1 on any failure, 0 otherwise.")
    parser.add_argument("--smoke", action="store_true",
                        help="also load the profile and decode 16 greedy tokens with speculation on and off")
    return parser


def run(args: argparse.Namespace) -> int:
    from specchat.doctor import report, run_checks

    return report(run_checks(args.profile, smoke=args.smoke), lambda text: print(text, flush=True),
                  colour=sys.stdout.isatty())
