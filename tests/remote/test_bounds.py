"""A server's numbers are bounded by ours: non-finite or backward /metrics counters and
NaN timings are one protocol error with the turn closed in the recording (no
OverflowError), ``max_new_tokens`` holds whatever ``tokens_predicted`` a server claims
or however long it streams, and ``run --json`` stays strict JSON. The server is a
loopback stand-in."""

from __future__ import annotations

import json

import pytest

from tests.support.hostile_server import HostileServer, llama_profile, llama_routes, sse, vllm_profile, vllm_routes
from tests.support.sessions_helpers import cli

LIMIT = "[sampling]\nmax_new_tokens = 8\n"


def strict(line: str):
    def refuse(word):
        raise ValueError(f"{word} in --json output")
    return json.loads(line, parse_constant=refuse)


def run_json(tmp_path, profile):
    """`specchat run --json` on ``profile``: (the process, its JSON lines, its recording's events)."""
    proc = cli("run", "--json", "--profile", str(profile), "--prompt", "hi", env_dir=tmp_path / "data")
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [strict(x) for x in proc.stdout.splitlines() if x.strip()]
    (recording,) = (tmp_path / "data" / "sessions").glob("*.jsonl")
    return proc, lines, [json.loads(x) for x in recording.read_text().splitlines()[1:]]


def counters(drafts, draft_tokens, accepted):
    p = "llamacpp:spec_decode_"
    return (f"{p}num_drafts_total {drafts}\n{p}num_draft_tokens_total {draft_tokens}\n"
            f"{p}num_accepted_tokens_total {accepted}\n"
            f'{p}num_accepted_tokens_per_pos_total{{position="0"}} 0\n')


@pytest.mark.parametrize("after, words", [
    (counters("+Inf", 2, 1), "counter llamacpp:spec_decode_num_drafts is inf, not a count"),
    (counters(1, "NaN", 1), "counter llamacpp:spec_decode_num_draft_tokens is nan, not a count"),
    (counters(0, 0, 0), "counters went backwards"),
    (counters(6, 7, 9), "more accepted drafts than it proposed"),
])
def test_bad_metrics_counters_are_one_protocol_error_and_the_turn_still_closes(tmp_path, after, words):
    before = counters(5, 5, 5)
    server = HostileServer({**llama_routes(), "/metrics": lambda r, seen: (
        200, before if sum(x.path == "/metrics" for x in seen) <= 2 else after)})  # describe, turn start; turn end
    try:
        proc, lines, events = run_json(tmp_path, llama_profile(tmp_path, server.url))
    finally:
        server.close()
    errors = [x for x in proc.stderr.splitlines() if x.startswith("specchat: error:")]
    assert proc.returncode == 1 and len(errors) == 1 and words in errors[0], proc.stderr
    assert lines[-1]["type"] == "summary" and lines[-1]["text"] == "Hi" and "server_counters" not in lines[-1]
    assert [e["type"] for e in events[-2:]] == ["ErrorEvent", "TurnFinished"]


@pytest.mark.parametrize("claimed", [10**6, 10**9])
def test_a_claimed_token_count_beyond_max_new_tokens_is_refused_not_allocated(tmp_path, claimed):
    stream = sse({"content": "x", "tokens": [7], "tokens_predicted": claimed, "timings": {"predicted_ms": 1.0}})
    server = HostileServer(llama_routes(completion=stream))
    try:
        proc, lines, events = run_json(tmp_path, llama_profile(tmp_path, server.url, extra=LIMIT))
    finally:
        server.close()
    assert proc.returncode == 1 and f"'tokens_predicted' {claimed} is beyond the 8 tokens asked for" in proc.stderr
    assert lines == [lines[-1]] and lines[-1]["finish_reason"] == "error"  # no token line
    assert events[-1]["type"] == "TurnFinished"


def test_an_endless_stream_is_cut_at_max_new_tokens(tmp_path):
    token = {"choices": [{"delta": {"content": "a"}, "logprobs": {"content": [{"token": "a", "logprob": -0.1}]},
                          "finish_reason": None}]}
    server = HostileServer({**vllm_routes(), "/v1/chat/completions": (200, sse(*[token] * 5000))})
    profile = vllm_profile(tmp_path, server.url)
    profile.write_text(profile.read_text() + LIMIT)
    try:
        proc, lines, events = run_json(tmp_path, profile)
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr
    assert lines[-1]["finish_reason"] == "length" and lines[-1]["text"] == "a" * 8 and len(lines) == 9


def test_nan_timings_from_a_server_are_a_malformed_chunk_and_json_stays_strict(tmp_path):
    stream = "data: " + '{"content": "x", "tokens": [7], "tokens_predicted": 1, "timings": {"predicted_ms": NaN}}\n\n'
    server = HostileServer(llama_routes(completion=stream))
    try:
        proc, lines, events = run_json(tmp_path, llama_profile(tmp_path, server.url))
    finally:
        server.close()
    assert proc.returncode == 1 and "/completion: malformed chunk" in proc.stderr
    assert events[-1]["type"] == "TurnFinished"


def test_run_json_writes_a_non_finite_figure_as_null():
    from specchat.sanitize import inert_json

    assert strict(inert_json({"a": [float("nan"), 1.5, {"b": float("inf")}]})) == {"a": [None, 1.5, {"b": None}]}


def test_a_reply_nested_too_deeply_is_a_remote_error_not_a_traceback():
    """A hostile server's JSON nested past the decoder's depth: one RemoteError line, in a
    reply and in an error body alike."""
    from specchat.remote.http import Endpoint, RemoteError, _error_text

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RemoteError, match="answer is not JSON"):
        Endpoint("http://127.0.0.1:9")._parse(deep, "/completion")
    assert _error_text(deep) == deep  # shown as text (shortened and cleaned where it is shown)
