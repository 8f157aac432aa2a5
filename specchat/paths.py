"""Where specchat keeps its files (platformdirs), each redirectable so tests never touch a user's:
``SPECCHAT_CACHE_DIR`` (converted models, re-creatable data), ``SPECCHAT_CONFIG_DIR`` (user
``profiles/`` and ``themes/``), ``SPECCHAT_DATA_DIR`` (recorded sessions and exports).
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "specchat"


def _dir(env: str, kind: str) -> Path:
    value = os.environ.get(env)
    if value:
        return Path(value).expanduser()
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    return _dir("SPECCHAT_CACHE_DIR", "cache")


def config_dir() -> Path:
    return _dir("SPECCHAT_CONFIG_DIR", "config")


def data_dir() -> Path:
    return _dir("SPECCHAT_DATA_DIR", "data")


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def shipped(name: str) -> Path:
    """A shipped resource dir (profiles, themes, demos): inside the installed package, else the source
    checkout's top level."""
    here = Path(__file__).resolve().parent
    return here / name if (here / name).is_dir() else here.parent / name


def shipped_profiles_dir() -> Path:
    return shipped("profiles")


def shipped_themes_dir() -> Path:
    return shipped("themes")
