"""Subcommands: one module each, exposing ``add_parser(subparsers)`` and ``run(args) -> int``.

Adding a subcommand is adding its module name to COMMANDS. A listed module that is
not written yet is skipped, so the CLI keeps working while parts are in progress.
Modules are imported when the parser is built, so they must not import torch at
module level (``specchat --help`` stays fast).
"""

from __future__ import annotations

import importlib
from types import ModuleType

COMMANDS = [
    "run",
    "profiles",
    "bench",
    "verify",
    "replay",
    "demo",
    "export",
    "train_head",
    "serve",
    "doctor",
    "plan",
]


def available_commands() -> list[ModuleType]:
    modules = []
    for name in COMMANDS:
        qualified = f"{__name__}.{name}"
        try:
            modules.append(importlib.import_module(qualified))
        except ModuleNotFoundError as error:
            if error.name != qualified:  # the module exists but is broken: say so
                raise
    return modules
