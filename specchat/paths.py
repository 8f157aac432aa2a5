"""Where specchat keeps its files (platform conventions via platformdirs).

Each directory can be redirected with an environment variable so tests and
sandboxes never touch a real user's files:

* ``SPECCHAT_CACHE_DIR``  – converted models and other re-creatable data.
* ``SPECCHAT_CONFIG_DIR`` – user profiles (``profiles/``) and themes (``themes/``).
* ``SPECCHAT_DATA_DIR``   – recorded sessions and exports.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "specchat"


def _dir(env: str, default) -> Path:
    value = os.environ.get(env)
    if value:
        return Path(value).expanduser()
    return Path(default())


def cache_dir() -> Path:
    import platformdirs

    return _dir("SPECCHAT_CACHE_DIR", lambda: platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    import platformdirs

    return _dir("SPECCHAT_CONFIG_DIR", lambda: platformdirs.user_config_dir(APP_NAME, appauthor=False))


def data_dir() -> Path:
    import platformdirs

    return _dir("SPECCHAT_DATA_DIR", lambda: platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def _package_or_repo(name: str) -> Path:
    """A shipped resource dir: inside the installed package, else the source checkout's top level."""
    here = Path(__file__).resolve().parent
    packaged = here / name
    if packaged.is_dir():
        return packaged
    return here.parent / name


def shipped_profiles_dir() -> Path:
    return _package_or_repo("profiles")


def shipped_themes_dir() -> Path:
    return _package_or_repo("themes")
