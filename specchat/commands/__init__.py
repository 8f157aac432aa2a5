"""Subcommands: a module each, with ``add_parser(subparsers)``, ``run(args) -> int`` and ``SHARED``
(the cli.SHARED_OPTIONS it takes), named in COMMANDS. They are imported to build the parser, so
none imports torch at module level (``specchat --help`` stays fast).
"""

from __future__ import annotations

import importlib
from types import ModuleType

COMMANDS = ["run", "profiles", "bench", "verify", "replay", "demo", "export", "train_head", "serve", "doctor", "plan", "models"]


def available_commands() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in COMMANDS]
