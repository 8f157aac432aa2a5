"""Themes from TOML files: ``loaded, failed = load_themes(dirs)``; a bad file lands in
``failed`` with a one-line reason and the app still starts. Design notes: docs/design/ui.md
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from textual.color import Color, ColorParseError
from textual.css.constants import VALID_STYLE_FLAGS
from textual.theme import Theme

from specchat import untrusted
from specchat.paths import shipped_themes_dir, user_themes_dir

# Provenance colours for themes that do not name their own (Textual's built-in themes).
SPEC_VARIABLE_DEFAULTS = {"spec-accepted": "#5fb85f", "spec-resampled": "#e0a040", "spec-bonus": "#58a6ff",
                          "spec-target": "#b0b0b0"}

_COLOUR_KEYS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
                "surface", "panel", "boost")
_OTHER_KEYS = {"name": str, "dark": bool, "luminosity_spread": float, "text_alpha": float}


@dataclass(frozen=True)
class ThemeLoadFailure:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


_ALPHA = re.compile(r"\s+\d+(\.\d+)?%$")


def _check_colour(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"key '{key}' must be a colour string like \"#3a7bd5\", got {value!r}")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(f"key '{key}' = {value!r} is not a colour — use \"#rrggbb\" or a colour name") from None
    return value


def _check_variable(key: str, value: object) -> str:
    """A ``[variables]`` value as Textual's stylesheet will read it: a text style for
    ``*-style`` keys, else a colour (optionally with an alpha like ``60%``, or ``auto``)."""
    where = f"variables.{key}"
    if not isinstance(value, str):
        raise ValueError(f"key '{where}' must be a string, got {value!r}")
    if key.endswith("-style"):
        words = value.split()
        if not words or any(word not in VALID_STYLE_FLAGS for word in words):
            raise ValueError(f"key '{where}' = {value!r} is not a text style — use words like \"bold\", "
                             f"\"underline\", \"reverse\" or \"none\"")
        return value
    colour = _ALPHA.sub("", value.strip())
    if colour not in ("auto", "initial"):
        _check_colour(where, colour)
    return value


def theme_from_toml(path: Path) -> Theme:
    """Parse one theme file. Raises ``ValueError`` with a one-line reason."""
    try:
        data = untrusted.toml(untrusted.read_text(path))
    except untrusted.Unreadable as exc:
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
            if kind is float and not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"key '{key}' = {value!r} must be a number from 0 to 1")
            kwargs[key] = value
    if not isinstance(kwargs["name"], str) or not kwargs["name"]:
        raise ValueError("key 'name' must be a non-empty string")
    for key in _COLOUR_KEYS:
        if key in data:
            kwargs[key] = _check_colour(key, data[key])
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError("key 'variables' must be a table")
    checked = {key: _check_variable(key, value) for key, value in variables.items()}
    kwargs["variables"] = {**SPEC_VARIABLE_DEFAULTS, **checked}
    theme = Theme(**kwargs)  # type: ignore[arg-type]
    try:  # what Textual derives from it when the theme is applied
        theme.to_color_system().generate()
    except Exception as exc:  # noqa: BLE001 - any failure here would have crashed the app
        raise ValueError(f"Textual cannot use it ({type(exc).__name__}: {exc})") from None
    return theme


def load_themes(dirs: Path | Iterable[Path]) -> tuple[list[Theme], list[ThemeLoadFailure]]:
    """Every ``*.toml`` in ``dirs`` (missing dirs skipped), by file name; a later dir's theme replaces an
    earlier one of the same name (a user's ``specchat-dark.toml`` overrides the shipped one)."""
    if isinstance(dirs, Path):
        dirs = [dirs]
    by_name: dict[str, Theme] = {}
    failed: list[ThemeLoadFailure] = []
    for directory in dirs:
        for path in sorted(directory.glob("*.toml")) if directory.is_dir() else ():
            try:
                theme = theme_from_toml(path)
            except ValueError as exc:
                failed.append(ThemeLoadFailure(path, str(exc)))
                continue
            by_name[theme.name] = theme
    return list(by_name.values()), failed


def theme_dirs() -> list[Path]:
    """Shipped themes first, then the user's (which win on a name clash)."""
    return [shipped_themes_dir(), user_themes_dir()]
