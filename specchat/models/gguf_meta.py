"""A GGUF file's header read whole for ``models list`` and doctor: architecture, name,
parameters and a tokenizer fingerprint (which models can draft for which). It is someone
else's bytes: every count is checked against the file's size, and anything off is a ValueError."""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from pathlib import Path

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_KEYS = 1 << 16
MAX_STRING = 1 << 20
WANTED = ("general.architecture", "general.name", "tokenizer.ggml.model")
MAX_DIMS = 4  # GGML_MAX_DIMS


@dataclass(frozen=True)
class GgufInfo:
    architecture: str
    name: str
    tokenizer: str  # a fingerprint: equal for two files whose ids name the same tokens
    vocab_size: int
    parameters: int


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
        n_tensors, n_keys = reader.scalar("<Q"), reader.scalar("<Q")
        if n_keys > MAX_KEYS:
            raise ValueError(f"{n_keys:,} metadata keys")
        found: dict[str, str] = {}
        tokens, vocab, alignment = hashlib.sha256(), 0, 32
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
                value = reader.scalar(SCALARS[kind])
                if key == "general.alignment" and kind == 4:
                    alignment = value
            else:
                raise ValueError(f"unknown metadata type {kind}")
        parameters = _tensors(reader, n_tensors, alignment)
    model = found.get("tokenizer.ggml.model", "")
    fingerprint = hashlib.sha256(model.encode() + b"\0" + tokens.digest()).hexdigest()[:16] if vocab else ""
    return GgufInfo(found.get("general.architecture", "?"), found.get("general.name", ""), fingerprint, vocab,
                    parameters)


def _tensors(reader: _Reader, count: int, alignment: int) -> int:
    """The parameters in the tensor table, each tensor's data checked to lie inside the
    file (it starts at the table's end, rounded up to ``alignment``)."""
    from gguf.constants import GGML_QUANT_SIZES  # per tensor type: (elements, bytes) a block

    if count > reader.size // 24:  # a tensor's entry takes at least 24 bytes
        raise ValueError(f"{count:,} tensors")
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"an alignment of {alignment}")
    parameters, extents = 0, []
    for _ in range(count):
        reader.string()  # its name
        n_dims = reader.scalar("<I")
        if n_dims > MAX_DIMS:
            raise ValueError(f"a tensor of {n_dims} dimensions")
        elements = math.prod(reader.scalar("<Q") for _ in range(n_dims))
        kind, offset = reader.scalar("<I"), reader.scalar("<Q")
        if kind not in GGML_QUANT_SIZES:
            raise ValueError(f"unknown tensor type {kind}")
        block, size = GGML_QUANT_SIZES[kind]
        parameters += elements
        extents.append(offset + elements * size // block)
    start = -(-reader.handle.tell() // alignment) * alignment
    if any(start + end > reader.size for end in extents):
        raise ValueError("a tensor's data runs past the end of the file")
    return parameters


def _skip_array(reader: _Reader, inner: int, count: int) -> None:
    if inner == STRING:
        for _ in range(count):
            reader.string()
    elif inner in SCALARS:
        reader.take(struct.calcsize(SCALARS[inner]) * count)
    else:
        raise ValueError(f"an array of type {inner}")
