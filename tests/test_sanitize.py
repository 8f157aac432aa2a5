"""The one sanitiser (specchat/sanitize.py), case by case: what acts on a terminal goes,
what reads as text stays."""

from __future__ import annotations

import json

import pytest

from specchat.errors import SpecchatError
from specchat.events import Step, StepEvent, StepStats, Token
from specchat.sanitize import clean, clean_data, clean_line, decode_input, inert_json


@pytest.mark.parametrize("text, expected", [
    ("plain text, ünïcödé, 漢字, emoji 👨\u200d👩 (ZWJ kept)", "plain text, ünïcödé, 漢字, emoji 👨\u200d👩 (ZWJ kept)"),
    ("tabs\tand\nnewlines", "tabs\tand\nnewlines"),
    ("CR LF\r\nbecomes LF; a bare\rCR goes", "CR LF\nbecomes LF; a bareCR goes"),
    ("title \x1b]0;PWNED\x07!", "title !"),  # OSC 0, BEL-terminated
    ("clip \x1b]52;c;UFdORUQ=\x1b\\!", "clip !"),  # OSC 52, ST-terminated
    ("link \x1b]8;;http://x\x1b\\text\x1b]8;;\x1b\\", "link text"),  # OSC 8 hyperlink: the text stays
    ("clear \x1b[2J\x1b[H\x1b[38;5;196mred\x1b[0m", "clear red"),  # CSI, SGR included
    ("dcs \x1bP1$qm\x1b\\ pm \x1b^x\x1b\\ apc \x1b_x\x1b\\ sos \x1bXx\x1b\\.", "dcs  pm  apc  sos ."),
    ("charset \x1b(B keypad \x1b= lone \x1b", "charset  keypad  lone "),  # ESC ( B: one sequence
    ("c1 \x9b2J csi, \x9d0;PWNED\x9c osc, \x90x\x9c dcs, \x85 nel", "c1  csi,  osc,  dcs,  nel"),
    ("bidi \u202eevil\u202c \u2066iso\u2069 \u200fmark \u061c \u200b \ufeff", "bidi evil iso mark   "),
    ("tags \U000e0041\U000e007f, soft\u00adhyphen", "tags , softhyphen"),
    ("unterminated \x1b]0;title\nnext line survives", "unterminated \nnext line survives"),
    ("C0 \x00\x01\x07\x08\x0b\x0c\x1a\x7f gone", "C0  gone"),
])
def test_clean(text, expected):
    assert clean(text) == expected


def test_decode_input_turns_surrogates_into_text():
    assert decode_input("a \udcff b") == "a \ufffd b"  # an undecodable byte from argv or a terminal
    assert decode_input("\ud83d\ude00") == "😀"  # a pair: the character
    assert decode_input("fine") == "fine"
    assert clean("x \udcfe").encode("utf-8") == "x \ufffd".encode("utf-8")  # always encodable


def test_clean_line_cleans_each_part_on_its_own():
    # a broken sequence in one part must not eat the next
    assert clean_line("file\x1b]0;oops", "message\nline 2", "", "hint") == "file message line 2 hint"


def test_clean_data_rebuilds_events_only_where_needed():
    token = Token(1, "accepted", text="ok")
    event = StepEvent(1, Step((token, Token(2, "bonus", text="\x1b[2Jx")), StepStats(1, 1, 1)), 0.1)
    cleaned = clean_data(event)
    assert [t.text for t in cleaned.step.tokens] == ["ok", "x"]
    assert cleaned.step.tokens[0] is token  # untouched parts are the same objects
    same = StepEvent(1, Step((token,), StepStats(0, 0, 0)), 0.1)
    assert clean_data(same) is same
    assert clean_data({"k\x9b": ["v\x07", 3]}) == {"k": ["v", 3]}


def test_inert_json_keeps_the_data_exact_but_escaped():
    value = {"text": "a\x1b]0;t\x07\x9b\u202e\U000e0041 é"}
    line = inert_json(value)
    assert json.loads(line) == value
    assert all(ch == "\n" or 0x20 <= ord(ch) < 0x7f or ord(ch) > 0x9f and ch != "\u202e" for ch in line)
    assert "é" in line  # ordinary text stays readable


def test_every_error_line_is_inert():
    error = SpecchatError("unknown key '\x1b]0;x\x07k'", file="evil\x1b]0;unterminated.jsonl", hint="\u202ehint")
    assert str(error) == "evil: unknown key 'k' — hint"
