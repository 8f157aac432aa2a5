"""A server's counts and shapes that no step can be built from are one malformed-chunk
line, never an IndexError or a 1500 % acceptance rate (issue 59, item 8).

* llama-server: ``draft_n_accepted`` above ``draft_n`` (or a step keeping more than it
  verified). Planted bug: no check — ``_Open`` sized by the kept count indexes past its drafts.
* vLLM: ``logprobs`` as a list instead of an object. Planted bug: ``.get`` on the list
  (AttributeError).
"""

from __future__ import annotations

import pytest

from specchat.remote.llama_server_steps import MalformedChunk, StepBuilder
from specchat.remote.vllm import chunk_tokens
from tests.remote.test_steps import chunk


@pytest.mark.parametrize("counts", [[(4, 60)], [(4, 1), (5, 4)], [(4, 2), (6, 1)]])
def test_llama_server_kept_drafts_beyond_the_verified_are_malformed(counts):
    builder = StepBuilder(num_speculative_tokens=4)
    with pytest.raises(MalformedChunk, match="draft_n_accepted"):
        for n, (d, a) in enumerate(counts, 1):
            builder.feed(chunk(n * 5, 7, d=d, a=a))


def test_counts_that_follow_are_taken():
    builder = StepBuilder(num_speculative_tokens=4)
    for n, (d, a) in enumerate([(4, 1), (8, 4), (8, 4)], 1):
        builder.feed(chunk(n * 3, 7, d=d, a=a))
    stats = [s.stats for s in builder.finish()]
    assert stats and all(s.num_accepted_tokens <= s.num_draft_tokens for s in stats)


@pytest.mark.parametrize("logprobs", [[{"token": "x", "logprob": -0.1}], "x", 3])
def test_vllm_logprobs_that_is_no_object_is_malformed(logprobs):
    with pytest.raises(MalformedChunk, match="'logprobs' is not an object"):
        chunk_tokens({"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": logprobs}]})
