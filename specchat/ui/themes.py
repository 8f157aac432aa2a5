"""Themes from TOML files: ``loaded, failed = load_themes(dirs)``.

A theme file is a flat table of Textual theme colours plus a ``[variables]`` table;
the provenance colours live there (``spec-accepted`` …) so the stylesheet only ever
names theme variables and every theme works without CSS edits::

    name = "specchat-dark"
    dark = true
    primary = "#4f9dde"
    background = "#14161a"
    [variables]
    spec-accepted = "#7ccf7c"

One bad file never stops the app: it lands in ``failed`` with a one-line reason and
the app reports it (posting's ``UserThemeLoadResult`` pattern).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from textual.color import Color, ColorParseError
from textual.theme import Theme

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Provenance colours for themes that do not name their own (Textual's built-in themes).
SPEC_VARIABLE_DEFAULTS: dict[str, str] = {
    "spec-accepted": "#5fb85f",
    "spec-resampled": "#e0a040",
    "spec-bonus": "#58a6ff",
    "spec-target": "#b0b0b0",
}

_COLOUR_KEYS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
_OTHER_KEYS = {"name": str, "dark": bool, "luminosity_spread": float, "text_alpha": float}


@dataclass(frozen=True)
class ThemeLoadFailure:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _check_colour(path: Path, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"key '{key}' must be a colour string like \"#3a7bd5\", got {value!r}")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(f"key '{key}' = {value!r} is not a colour — use \"#rrggbb\" or a colour name") from None
    return value


def theme_from_toml(path: Path) -> Theme:
    """Parse one theme file. Raises ``ValueError`` with a one-line reason."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    except OSError as exc:
        raise ValueError(f"cannot read ({exc.strerror})") from None
    import difflib

    known = set(_COLOUR_KEYS) | set(_OTHER_KEYS) | {"variables"}
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" — did you mean '{close[0]}'?" if close else ""
            raise ValueError(f"key '{key}' is unknown{hint}")
    if "primary" not in data:
        raise ValueError("key 'primary' is missing — every theme needs a primary colour")
    kwargs: dict[str, object] = {"name": data.get("name", path.stem)}
    for key, kind in _OTHER_KEYS.items():
        if key in data and key != "name":
            value = data[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind):
                raise ValueError(f"key '{key}' must be {kind.__name__}, got {value!r}")
            kwargs[key] = value
    if not isinstance(kwargs["name"], str) or not kwargs["name"]:
        raise ValueError("key 'name' must be a non-empty string")
    for key in _COLOUR_KEYS:
        if key in data:
            kwargs[key] = _check_colour(path, key, data[key])
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError("key 'variables' must be a table")
    checked = {}
    for key, value in variables.items():
        if key.startswith("spec-"):
            _check_colour(path, f"variables.{key}", value)
        checked[key] = str(value)
    kwargs["variables"] = {**SPEC_VARIABLE_DEFAULTS, **checked}
    return Theme(**kwargs)  # type: ignore[arg-type]


def load_themes(dirs: Path | Iterable[Path]) -> tuple[list[Theme], list[ThemeLoadFailure]]:
    """Every ``*.toml`` in ``dirs`` (missing dirs are skipped), sorted by file name.

    A later dir's theme replaces an earlier one of the same name, so a user's
    ``specchat-dark.toml`` overrides the shipped one.
    """
    if isinstance(dirs, Path):
        dirs = [dirs]
    by_name: dict[str, Theme] = {}
    failed: list[ThemeLoadFailure] = []
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            try:
                theme = theme_from_toml(path)
            except ValueError as exc:
                failed.append(ThemeLoadFailure(path, str(exc)))
                continue
            by_name[theme.name] = theme
    return list(by_name.values()), failed


def theme_dirs() -> list[Path]:
    """Shipped themes first, then the user's (which win on a name clash)."""
    from specchat.paths import shipped_themes_dir, user_themes_dir

    return [shipped_themes_dir(), user_themes_dir()]
