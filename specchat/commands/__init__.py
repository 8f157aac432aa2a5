"""Subcommands: one module each, with ``add_parser(subparsers)``, ``run(args) -> int`` and ``SHARED``
(the options of cli.SHARED_OPTIONS it takes).

Adding a subcommand is adding its module name to COMMANDS. Modules are imported when
the parser is built, so they must not import torch at module level (``specchat --help``
stays fast).
"""

from __future__ import annotations

import importlib
from types import ModuleType

COMMANDS = ["run", "profiles", "bench", "verify", "replay", "demo", "export", "train_head", "serve", "doctor", "plan", "models"]


def available_commands() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in COMMANDS]
