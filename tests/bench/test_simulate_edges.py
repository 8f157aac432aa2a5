"""``replay --simulate`` at its edges (issue 59, item 8).

* A reply a stop string ended has an ordinary last token: the simulated reply must not
  end at that token's first appearance. Planted bug: the last token taken as the stop
  token whatever it is — the reply [5, 6, 5, 7, 5] simulates as one token.
* ``--gamma abc`` is refused before the recording is read (and torch imported). Planted
  bug: the check after ``read_recording`` — a missing recording is named instead.
"""

from __future__ import annotations

import pytest

from specchat.bench.simulate import simulate
from specchat.commands.simulate import simulate_recording
from specchat.config.model import SpeculationSpec
from specchat.errors import SpecchatError
from specchat.events import Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted

STATS = StepStats(num_speculative_tokens=0, num_draft_tokens=0, num_accepted_tokens=0)


def chat(reply: list[int], finish: str) -> list:
    prompt = (1, 2, 3, 4)
    return [TurnStarted(1, len(prompt), prompt_ids=prompt),
            StepEvent(1, Step(tuple(Token(i, "target") for i in reply), STATS), 0.0),
            TurnFinished(1, finish, "")]


@pytest.mark.parametrize("reply, finish", [([5, 6, 5, 7, 5], "stop"), ([5, 6, 7, 9], "eos"), ([5, 6, 5], "length")])
def test_a_simulated_reply_is_as_long_as_the_recorded_one(reply, finish):
    (steps,), _ = simulate(chat(reply, finish), SpeculationSpec(), "ngram", 3, 64)
    assert sum(1 + s.num_accepted_tokens for s in steps) == len(reply)


def test_a_gamma_that_is_no_number_is_refused_before_the_recording_is_read(tmp_path):
    with pytest.raises(SpecchatError, match="--gamma 'abc' is not a γ"):
        simulate_recording(tmp_path / "no-such-recording.jsonl", None, "abc")
