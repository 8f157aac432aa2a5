"""The one sanitiser for untrusted text on its way to a terminal or an export: escape sequences,
controls and disguising format characters out, newlines and tabs kept. Pure Python.
The full list and why: docs/design/sanitize.md
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

# Escape sequences, payload included. A string command's payload ends at its BEL or
# ST; one left unterminated ends at the next ESC or newline, so it cannot swallow the
# rest of a text (an error message, a transcript) — what it leaves is plain text.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"  # CSI: parameters, intermediates, final
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC DCS SOS PM APC
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?",  # any other escape (and a lone ESC)
)
_FORMAT = (
    "\u00ad\u061c\u180e\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f"
)
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Anything that makes the text need work: a fast path for the usual clean text.
_SUSPECT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}\ud800-\udfff]")
# Characters json.dumps(ensure_ascii=False) leaves raw that a terminal could act on.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f{_FORMAT}\ud800-\udfff]")


def decode_input(text: str) -> str:
    """Text as typed or passed on the command line, with surrogates resolved: a valid
    pair becomes its character, a lone one (an undecodable byte) U+FFFD. Done once, at
    the edge where input enters the program, so nothing later meets unencodable text."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if _SURROGATE.search(text) else text


def clean(text: str) -> str:
    """``text`` with every escape sequence, control and disguising format character
    removed (see the module docstring); newlines and tabs kept."""
    if not isinstance(text, str):
        text = str(text)
    if not _SUSPECT.search(text):
        return text
    text = decode_input(text).replace("\r\n", "\n")
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


def clean_line(*parts: Any) -> str:
    """:func:`clean` on one line: runs of whitespace (newlines too) become one space.
    Several ``parts`` are cleaned one by one, then joined: a broken sequence in one
    field never eats the next."""
    words = (" ".join(clean(p if isinstance(p, str) else str(p)).split()) for p in parts)
    return " ".join(w for w in words if w)


def clean_data(value: Any) -> Any:
    """``value`` with :func:`clean` applied to every string inside it — dataclasses
    (events), dicts, lists and tuples are rebuilt only where something changed."""
    if isinstance(value, str):
        return clean(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = clean_data(old)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, dict):
        items = [(clean_data(k), clean_data(v)) for k, v in value.items()]
        changed = any(nk is not k or nv is not v for (nk, nv), (k, v) in zip(items, value.items()))
        return dict(items) if changed else value
    if isinstance(value, (list, tuple)):
        items = [clean_data(v) for v in value]
        if all(n is o for n, o in zip(items, value)):
            return value
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return value


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code > 0xFFFF:  # outside the BMP: a JSON surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def inert_json(value: Any, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` that a terminal can show safely: the
    exact data, with C1 controls and format characters written as ``\\uXXXX`` escapes
    (JSON already escapes C0 ones). For ``--json`` output and recording lines.
    Strict JSON: a NaN or infinity, which JSON cannot spell, is written as null."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, **options)
    except ValueError:  # rare: only then is the value walked
        text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, **options)
    return _JSON_UNSAFE.sub(_escape, text)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
