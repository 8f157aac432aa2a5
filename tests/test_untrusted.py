"""The one module of readers for untrusted input (specchat/untrusted.py), case by case:
each failure is an Unreadable with a short reason, never a RecursionError, a
UnicodeDecodeError or a struct.error; the callers' own wording is tested where they are."""

from __future__ import annotations

import struct

import pytest

from specchat import untrusted
from specchat.untrusted import TooDeep, Unreadable

DEEP = "[" * 100_000 + "]" * 100_000  # past the parser's own recursion


@pytest.mark.parametrize("text, kind, message", [
    ('{"a": [1, {"b": 2}]}', None, None),
    ("[" * 32 + "]" * 32, None, None),
    ("[" * 33 + "]" * 33, TooDeep, "nested more than 32 levels deep"),
    (DEEP, TooDeep, "nested too deeply"),
    ("{oops", Unreadable, "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b'"caf\xe9"', Unreadable, "byte 4 is not UTF-8"),
])
def test_json_value(text, kind, message):
    if kind is None:
        assert untrusted.json_value(text) is not None
        return
    with pytest.raises(kind) as info:
        untrusted.json_value(text)
    assert str(info.value) == message


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"x": 1e999}'])
def test_finite_json_refuses_what_json_has_not(text):
    assert untrusted.json_value(text) is not None  # Python's own parser takes it
    with pytest.raises(Unreadable, match="not a"):
        untrusted.json_value(text, finite=True)


def test_toml_gives_the_place_apart_from_the_reason():
    with pytest.raises(Unreadable) as info:
        untrusted.toml("[[prompts]\n")
    error = info.value
    assert (error.reason, error.line, error.column) == ("Expected ']]' at the end of an array declaration", 1, 10)
    assert str(error) == "Expected ']]' at the end of an array declaration (at line 1, column 10)"
    with pytest.raises(TooDeep, match="nested too deeply"):
        untrusted.toml("x = " + "[" * 500 + "]" * 500)


def test_read_text_names_the_first_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin-1.txt"
    path.write_bytes(b"caf\xe9")
    with pytest.raises(Unreadable) as info:
        untrusted.read_text(path)
    assert (str(info.value), info.value.reason) == ("byte 3 is not UTF-8", "byte 3 is 0xe9")


def _safetensors(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize("data, reason", [
    (b"\x01", "shorter than the 8 bytes"),
    (struct.pack("<Q", 1 << 40), "a header of"),
    (_safetensors(b"{oops"), "Expecting property name"),
    (_safetensors(DEEP.encode()), "nested too deeply"),
    (_safetensors(b"[]"), "not a JSON object"),
    (_safetensors(b'{"w": {"shape": "3"}}'), "tensor 'w' lacks"),
    (_safetensors(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, -8]}}'), "tensor 'w' lacks"),
])
def test_a_damaged_safetensors_header_is_unreadable(tmp_path, data, reason):
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    with pytest.raises(Unreadable, match=reason):
        untrusted.safetensors_header(path)


def test_a_safetensors_header_gives_its_length_and_tensors(tmp_path):
    header = b'{"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}'
    path = tmp_path / "model.safetensors"
    path.write_bytes(_safetensors(header) + bytes(24))
    assert untrusted.safetensors_header(path) == (len(header), {"w": {"dtype": "F32", "shape": [2, 3],
                                                                      "data_offsets": [0, 24]}})
