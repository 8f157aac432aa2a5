"""A GGUF file's header read with every count checked against the file's size, for
``models list``: its architecture and name, and a fingerprint of its tokenizer (the
model kind and the token list), which says which models can draft for which.

The header is someone else's bytes: a count past what the file can hold, a key or
string longer than 1 MB, or an unknown type ends the read with a ValueError.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_KEYS = 1 << 16
MAX_STRING = 1 << 20
WANTED = ("general.architecture", "general.name", "tokenizer.ggml.model")


@dataclass(frozen=True)
class GgufInfo:
    architecture: str
    name: str
    tokenizer: str  # a fingerprint: equal for two files whose ids name the same tokens
    vocab_size: int


class _Reader:
    def __init__(self, handle, size: int) -> None:
        self.handle, self.size = handle, size

    def take(self, n: int) -> bytes:
        if n < 0 or self.handle.tell() + n > self.size:
            raise ValueError("the header runs past the end of the file")
        return self.handle.read(n)

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        n = self.scalar("<Q")
        if n > MAX_STRING:
            raise ValueError(f"a string of {n:,} bytes")
        return self.take(n)


def read_info(path: Path) -> GgufInfo:
    """The header's facts; ValueError (or OSError) when it is not a GGUF header."""
    with open(path, "rb", buffering=1 << 20) as handle:
        reader = _Reader(handle, path.stat().st_size)
        if reader.take(4) != b"GGUF":
            raise ValueError("not a GGUF file")
        version = reader.scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}")
        reader.scalar("<Q")  # tensors: not needed here
        n_keys = reader.scalar("<Q")
        if n_keys > MAX_KEYS:
            raise ValueError(f"{n_keys:,} metadata keys")
        found: dict[str, str] = {}
        tokens, vocab = hashlib.sha256(), 0
        for _ in range(n_keys):
            key = reader.string().decode("utf-8", "replace")
            kind = reader.scalar("<I")
            if kind == ARRAY:
                inner, count = reader.scalar("<I"), reader.scalar("<Q")
                if count > reader.size:
                    raise ValueError(f"an array of {count:,} items")
                if key == "tokenizer.ggml.tokens" and inner == STRING:
                    vocab = count
                    for _ in range(count):
                        tokens.update(reader.string() + b"\0")
                else:
                    _skip_array(reader, inner, count)
            elif kind == STRING:
                value = reader.string()
                if key in WANTED:
                    found[key] = value.decode("utf-8", "replace")
            elif kind in SCALARS:
                reader.scalar(SCALARS[kind])
            else:
                raise ValueError(f"unknown metadata type {kind}")
    model = found.get("tokenizer.ggml.model", "")
    fingerprint = hashlib.sha256(model.encode() + b"\0" + tokens.digest()).hexdigest()[:16] if vocab else ""
    return GgufInfo(found.get("general.architecture", "?"), found.get("general.name", ""), fingerprint, vocab)


def _skip_array(reader: _Reader, inner: int, count: int) -> None:
    if inner == STRING:
        for _ in range(count):
            reader.string()
    elif inner in SCALARS:
        reader.take(struct.calcsize(SCALARS[inner]) * count)
    else:
        raise ValueError(f"an array of type {inner}")
