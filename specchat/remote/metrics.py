"""A server's own speculation counters, from its Prometheus ``/metrics`` text; each turn
records their difference across it. Design notes: docs/design/remote.md"""

from __future__ import annotations

import math
import re
from typing import Any

from specchat.remote.http import RemoteError

_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
_POSITION = re.compile(r'position="(\d+)"')
PREFIXES = {"llama-server": "llamacpp:spec_decode_", "vllm": "vllm:spec_decode_"}
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
MAX_POSITIONS = 64  # per-position counters kept: γ beyond this is no real server's


class BadCounters(RemoteError):
    """The server's /metrics counters fail validation."""


def spec_counters(text: str, backend: str) -> dict[str, Any]:
    """{num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_position} summed
    over label sets; missing counters count 0. Lines that do not parse are skipped."""
    prefix = PREFIXES[backend]
    out: dict[str, Any] = {k: 0 for k in COUNTERS}
    per_pos: dict[int, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or not m.group(1).startswith(prefix):
            continue
        name = m.group(1)[len(prefix):].removesuffix("_total")
        pos = _POSITION.search(m.group(2) or "") if name == "num_accepted_tokens_per_pos" else None
        if name not in COUNTERS and (pos is None or int(pos.group(1)) >= MAX_POSITIONS):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if not math.isfinite(value) or value < 0:
            raise BadCounters(f"/metrics: counter {prefix}{name} is {value}, not a count")
        if pos is None:
            out[name] += value
        else:
            per_pos[int(pos.group(1))] = per_pos.get(int(pos.group(1)), 0) + value
    out["accepted_per_position"] = [per_pos[i] for i in sorted(per_pos)]
    return out


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after − before, as integers (Prometheus prints counters as floats). BadCounters
    when a counter went backwards (a restarted server) or more drafts were accepted
    than proposed."""
    delta: dict[str, Any] = {k: int(after[k] - before[k]) for k in COUNTERS}
    old = before["accepted_per_position"]
    delta["accepted_per_position"] = [int(v - (old[i] if i < len(old) else 0))
                                      for i, v in enumerate(after["accepted_per_position"])]
    if min(*(delta[k] for k in COUNTERS), *delta["accepted_per_position"]) < 0:
        raise BadCounters("/metrics: the server's counters went backwards during the turn (was it restarted?)")
    if delta["num_accepted_tokens"] > delta["num_draft_tokens"]:
        raise BadCounters("/metrics: the server counts more accepted drafts than it proposed")
    return delta
