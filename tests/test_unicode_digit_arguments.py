"""Counts typed on the command line that ``str.isdigit`` calls digits and ``int`` refuses
('²', '³', '①'): each is the one-line error of any other bad count, not a ValueError
traceback. Found replaying issue 59's adversarial cases by hand
(docs/trials/2026-12-07-adversarial-replay). Planted bug each row kills: the check
``text.isdigit()`` without ``isascii()`` (``int('²')`` raises ValueError)."""

import pytest

from specchat.bench.concurrency import parse_levels
from specchat.bench.humaneval import _count
from specchat.commands.plan import _contexts
from specchat.errors import SpecchatError

CASES = [
    ("plan --contexts", lambda text: _contexts(f"256,{text}", None), "--contexts"),
    ("bench --concurrency", lambda text: parse_levels(f"1,{text}"), "--concurrency"),
    ("bench --prompts humaneval:N", lambda text: _count(f"humaneval:{text}", 164), "--prompts"),
]


@pytest.mark.parametrize("text", ["²", "³", "①", "٣"])
@pytest.mark.parametrize("name, parse, key", CASES, ids=[c[0] for c in CASES])
def test_a_digit_int_refuses_is_a_one_line_error(name, parse, key, text):
    with pytest.raises(SpecchatError) as caught:
        parse(text)
    assert caught.value.key == key and "\n" not in str(caught.value)


@pytest.mark.parametrize("name, parse, key", CASES, ids=[c[0] for c in CASES])
def test_ascii_counts_still_parse(name, parse, key):
    assert parse("64") is not None
