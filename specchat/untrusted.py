"""The readers of untrusted input: UTF-8 text, TOML, JSON nested at most MAX_DEPTH deep,
and a safetensors header. Each failure is :class:`Unreadable` (a ValueError) saying why in
a few words; the caller names the file and the fix in its own one-line error.
"""

from __future__ import annotations

import json
import math
import re
import struct
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_DEPTH = 32  # a recorded event nests ~6 deep; what reads a value next (the sanitiser) recurses
MAX_SAFETENSORS_HEADER = 100_000_000  # bytes: the safetensors format's own limit
_TOML_PLACE = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


class Unreadable(ValueError):
    """``str()``: why, with the parser's place in its own words; ``reason``: the same
    without the place; ``line``, ``column`` (1-based) where the parser names them."""

    def __init__(self, message: str, reason: str | None = None, line: int | None = None,
                 column: int | None = None) -> None:
        super().__init__(message)
        self.reason, self.line, self.column = reason or message, line, column


class TooDeep(Unreadable):
    """Nested past the parser's recursion (``limit`` None) or past ``limit`` levels."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__("nested too deeply" if limit is None else f"nested more than {limit} levels deep")
        self.limit = limit


def utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_utf8(error) from None


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text; an OSError passes through, for the caller to word."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise _not_utf8(error) from None


def _not_utf8(error: UnicodeDecodeError) -> Unreadable:
    at = error.start
    return Unreadable(f"byte {at} is not UTF-8", f"byte {at} is {error.object[at]:#04x}")


def toml(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        place = _TOML_PLACE.search(str(error))
        raise Unreadable(str(error), _TOML_PLACE.sub("", str(error)), *(
            (int(place.group(1)), int(place.group(2))) if place else ())) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise TooDeep() from None


def json_value(text: str | bytes, max_depth: int = MAX_DEPTH, finite: bool = False) -> Any:
    """The JSON value, nested at most ``max_depth`` deep; ``finite``: NaN, Infinity and
    1e999 refused (JSON has none; Python's parser takes them)."""
    options = {"parse_constant": _not_finite, "parse_float": _finite} if finite else {}
    text = utf8(text) if isinstance(text, bytes) else text
    try:
        value = json.loads(text, **options)
    except json.JSONDecodeError as error:
        raise Unreadable(str(error), error.msg, error.lineno, error.colno) from None
    except ValueError as error:  # a number ``finite`` refuses
        raise Unreadable(str(error)) from None
    except RecursionError:  # arrays or objects nested past the decoder's depth
        raise TooDeep() from None
    if _depth(value, max_depth) > max_depth:
        raise TooDeep(max_depth)
    return value


def json_object(text: str | bytes, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    value = json_value(text, max_depth)
    if not isinstance(value, dict):
        raise Unreadable("not a JSON object")
    return value


def safetensors_header(path: str | Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """(the header's length in bytes, its tensors by name: dtype, shape, data_offsets),
    each field checked for type; ``__metadata__`` left out."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise Unreadable("shorter than the 8 bytes that give its header's length")
        (size,) = struct.unpack("<Q", head)
        if size > MAX_SAFETENSORS_HEADER:
            raise Unreadable(f"a header of {size:,} bytes")
        header = json_object(f.read(size))
    tensors = {name: tensor for name, tensor in header.items() if name != "__metadata__"}
    for name, tensor in tensors.items():
        if not (isinstance(tensor, dict) and isinstance(tensor.get("dtype"), str)
                and _naturals(tensor.get("shape")) and _naturals(tensor.get("data_offsets"), 2)):
            raise Unreadable(f"tensor {name[:80]!r} lacks a dtype, shape or data_offsets of the right type")
    return size, tensors


def _naturals(value: Any, length: int | None = None) -> bool:
    return (isinstance(value, list) and (length is None or len(value) == length)
            and all(type(n) is int and n >= 0 for n in value))


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests arrays and objects (up to ``limit`` + 1), without recursion."""
    deepest, stack = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > limit:
            break
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _not_finite(word: str) -> float:
    raise ValueError(f"{word} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise ValueError(f"{text} is not a finite number")
    return value
