"""One client's request never ends another's reply (issue 59, item 2).

* ``temperature: 1e-320`` (a subnormal: finite and ≥ 0) is greedy, not an IndexError
  that failed every request in flight. Planted bug: ``greedy`` back to ``T <= 0``.
* A request whose verification fails (planted here: its sampler raises) gets its
  error, and a client streaming beside it gets its whole reply. Planted bug: the batch
  server failing every request in flight on any engine error (no ``failed`` callback).
"""

from __future__ import annotations

import json
import threading

from specchat.engine import engine as engine_module
from tests.serve.test_serve import PROMPTS, chat, near_tie_or_equal, request, served, stream, streamed_ids
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp
__all__ = ["served"]  # the module's own server (a fixture imported, not a name unused)
VICTIM_TOKENS = 32


def victim_beside(port: int, poison: dict) -> tuple[list, tuple[int, bytes]]:
    """A greedy chat streamed while ``poison`` is sent once its first token has come →
    (the stream's events, the poisoned request's (status, body))."""
    first, events = threading.Event(), []
    victim = threading.Thread(target=lambda: events.extend(stream(port, chat(PROMPTS[0], VICTIM_TOKENS), first)))
    victim.start()
    assert first.wait(120)
    answered = request(port, "POST", "/v1/chat/completions", poison)
    victim.join(120)
    return events, answered


def assert_whole(served, events: list) -> None:
    _, _, solo, prompts, target = served
    ids, finish, _ = streamed_ids(events)
    assert not any("error" in e for e in events[:-1]), events
    assert finish in ("stop", "length")
    assert near_tie_or_equal(target, prompts[PROMPTS[0]], ids[:len(solo[PROMPTS[0]])], solo[PROMPTS[0]]) is None


def test_a_subnormal_temperature_is_greedy_and_harms_no_one(served):
    port = served[1]
    events, (status, body) = victim_beside(port, chat(PROMPTS[1], 8, temperature=1e-320))
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"]
    assert_whole(served, events)


def test_a_request_that_fails_alone_ends_alone(served, monkeypatch):
    real = engine_module.verify

    def poisoned(logits, proposal, s):  # the sampler of the T = 0.5 request finds no token
        if s.params.temperature == 0.5:
            raise IndexError("index 0 is out of bounds for dimension 0 with size 0")
        return real(logits, proposal, s)

    monkeypatch.setattr(engine_module, "verify", poisoned)
    events, (status, body) = victim_beside(served[1], chat(PROMPTS[1], 8, temperature=0.5))
    assert status == 500 and "IndexError" in json.loads(body)["error"]["message"]
    assert_whole(served, events)
    monkeypatch.undo()
    status, body = request(served[1], "POST", "/v1/chat/completions", chat(PROMPTS[1], 4))
    assert status == 200, body  # its slot was freed, its cells dropped
