"""Small GGUF files written by hand: a header, string metadata and a token list, no
tensors (what models list and the stores read; nothing loads them)."""

import struct
from pathlib import Path


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, tokens: list[str], name: str = "tiny", padding: int = 0) -> Path:
    kvs = [("general.architecture", "qwen2"), ("general.name", name), ("tokenizer.ggml.model", "gpt2")]
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs) + 2)
    for key, value in kvs:
        out += _string(key) + struct.pack("<I", 8) + _string(value)
    out += _string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(map(_string, tokens))
    out += _string("general.file_type") + struct.pack("<II", 4, 15)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out + b"\0" * padding)
    return path
