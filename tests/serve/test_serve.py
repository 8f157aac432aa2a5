"""``specchat serve`` end to end: the default profile (embedded GGUF on llama.cpp, n-gram
lookup) served in-process on a free loopback port, with two chats decoded together.

* Two streaming chats at once both finish, each with as many tokens as its usage says
  (and max_tokens when it stops for length), each the one-sequence engine's greedy reply
  (up to a near-tie of the top two logits: a batch rounds a little differently).
* A client that drops its stream has its request cancelled ("abort") and the other
  chat's reply is what it is alone. Planted bug: the disconnect cancels the next
  request's index instead of its own — that check fails.
* /metrics carries vLLM's spec-decode counters (read by specchat's own vLLM client
  code), drafts > 0 after a repetitive prompt, matching the reply's own figures.
* Refusals: a non-loopback host without a key and a non-llama.cpp profile (exit 2, one
  line, nothing loaded); a missing key (401); bad JSON, bad fields, too long a prompt
  (400), too large a body (413) — always a JSON error, never a traceback.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import threading
import time

import pytest

from specchat.engine.batch.server import Handle
from specchat.remote.metrics import counter_delta, spec_counters
from tests.engine.batch.test_batched import near_tie_or_equal
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp
PROMPTS = [
    "Rewrite this with a docstring and type hints: def add(a, b): return a + b",
    "What is the capital of France? Answer in one sentence.",
    "Repeat after me three times: the quick brown fox jumps over the lazy dog.",
]
TOKENS = 16
LONG = "Write a long story about a dragon who learns to bake bread."  # a reply that outlasts the test


@pytest.fixture(scope="module")
def served():
    """(service, port, solo greedy replies' ids by prompt, prompt ids by prompt)."""
    from specchat.config import load_profile
    from specchat.engine import SamplingParams, SpeculativeEngine
    from specchat.loading import load_models
    from specchat.serve.http import make_server
    from specchat.serve.service import build_service

    # a fixed γ: whether drafts are verified must not hang on timings (γ = auto's plan
    # weighs measured step times, and a busy machine may make it decode plainly); one
    # llama.cpp thread: a thread per core waits on the other test workers' at every op
    profile = load_profile("default").replace(speculation={"num_speculative_tokens": 3}, target={"n_threads": 1})
    loaded = load_models(profile)
    service = build_service(profile, loaded, parallel=2)
    stops = service.chat.stop_token_ids
    prompts = {p: service.chat.prompt_ids([{"role": "user", "content": p}]) for p in PROMPTS}
    solo = {p: [t.id for s in SpeculativeEngine(loaded.target, None).generate(ids, SamplingParams(temperature=0.0),
                                                                             TOKENS, stops) for t in s.tokens]
            for p, ids in prompts.items()}
    server = make_server(service, "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield service, server.server_address[1], solo, prompts, loaded.target
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def request(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn.request(method, path, data, {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


def chat(prompt: str, n: int = TOKENS, **extra) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0,
            "return_token_ids": True, **extra}


def stream(port: int, body: dict, first: threading.Event | None = None) -> list:
    """Every SSE event of a streamed request, parsed ("[DONE]" kept as the string)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}).encode(),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    events = []
    for line in response:
        if line.startswith(b"data: "):
            text = line[6:].strip().decode()
            events.append(text if text == "[DONE]" else json.loads(text))
            if first is not None:
                first.set()
    conn.close()
    return events


def streamed_ids(events: list) -> tuple[list[int], str | None, dict | None]:
    """(token ids, finish reason, usage) of a stream's events."""
    ids, finish, usage = [], None, None
    for event in events[:-1]:
        for choice in event["choices"]:
            ids += choice["token_ids"]
            finish = choice["finish_reason"] or finish
        usage = event.get("usage") or usage
    assert events[-1] == "[DONE]"
    return ids, finish, usage


def test_two_streaming_chats_at_once_both_finish_with_their_replies(served):
    service, port, solo, prompts, target = served
    out = {}
    threads = [threading.Thread(target=lambda p=p: out.__setitem__(p, stream(
        port, chat(p, logprobs=True, stream_options={"include_usage": True})))) for p in PROMPTS[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for p in PROMPTS[:2]:
        ids, finish, usage = streamed_ids(out[p])
        entries = sum(len(c["logprobs"]["content"]) for e in out[p][:-1] for c in e["choices"])
        assert finish in ("stop", "length") and usage["completion_tokens"] == len(ids) == entries
        assert usage["prompt_tokens"] == len(prompts[p])
        assert finish != "length" or len(ids) == TOKENS
        assert near_tie_or_equal(target, prompts[p], ids, solo[p]) is None, (p, ids, solo[p])


def test_a_greedy_reply_is_the_one_sequence_engines(served):
    service, port, solo, prompts, target = served
    status, data = request(port, "POST", "/v1/chat/completions", chat(PROMPTS[1]))
    reply = json.loads(data)
    choice = reply["choices"][0]
    assert status == 200 and reply["object"] == "chat.completion" and reply["prompt_token_ids"] == prompts[PROMPTS[1]]
    assert near_tie_or_equal(target, prompts[PROMPTS[1]], choice["token_ids"], solo[PROMPTS[1]]) is None
    assert choice["message"]["content"] == service.chat.tokenizer.decode(choice["token_ids"], skip_special_tokens=True)


def aborted(port: int) -> int:
    text = request(port, "GET", "/metrics")[1].decode()
    return sum(int(float(line.split()[-1])) for line in text.splitlines()
               if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line)


def drop_one_stream(served) -> list[str]:
    """Chat A streams, chat B starts; A's client goes away. What went wrong (none: [])."""
    service, port, solo, prompts, target = served
    before = aborted(port)
    a = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    a.request("POST", "/v1/chat/completions", json.dumps({**chat(LONG, 64), "stream": True}).encode(),
              {"Content-Type": "application/json"})
    sock = a.sock  # http.client lets go of it once the response (no length: read to the close) begins
    response = a.getresponse()
    response.readline()  # A's first chunk: A is decoding
    first, out = threading.Event(), {}
    b = threading.Thread(target=lambda: out.__setitem__("b", stream(port, chat(PROMPTS[0]), first)))
    b.start()
    first.wait(60)  # B is decoding beside A
    sock.shutdown(socket.SHUT_RDWR)  # A's client goes away mid-stream
    response.close()
    b.join(120)
    deadline = time.monotonic() + 60
    while service.batch.running and time.monotonic() < deadline:
        time.sleep(0.05)
    problems = []
    ids, finish, _ = streamed_ids(out["b"])
    why = near_tie_or_equal(target, prompts[PROMPTS[0]], ids, solo[PROMPTS[0]])
    if finish not in ("stop", "length") or why:
        problems.append(f"B's reply changed: finish {finish}, {why}")
    if aborted(port) - before != 1:
        problems.append(f"{aborted(port) - before} requests aborted, not A alone")
    return problems


def test_a_client_that_goes_away_is_cancelled_alone(served):
    assert drop_one_stream(served) == []


def test_planted_cancelling_the_wrong_index_on_disconnect_is_caught(served, monkeypatch):
    def wrong_cancel(self):  # the planted bug: the next request's index
        if not self.finished:
            self._cancel(self.index + 1)

    monkeypatch.setattr(Handle, "cancel", wrong_cancel)
    assert drop_one_stream(served) != []


def test_metrics_count_the_drafts_under_vllms_names(served):
    service, port, *_ = served
    before = spec_counters(request(port, "GET", "/metrics")[1].decode(), "vllm")
    status, data = request(port, "POST", "/v1/chat/completions", chat(PROMPTS[2], 40))
    text = request(port, "GET", "/metrics")[1].decode()
    delta = counter_delta(before, spec_counters(text, "vllm"))
    stats = json.loads(data)["choices"][0]["speculative_decoding_stats"]
    assert status == 200 and delta["num_drafts"] > 0 and delta["num_accepted_tokens"] > 0
    assert (delta["num_drafts"], delta["num_draft_tokens"], delta["num_accepted_tokens"]) == (
        stats["num_spec_steps"], stats["num_draft_tokens"], stats["num_accepted_draft_tokens"])
    assert stats["mean_acceptance_length"] == 1 + stats["num_accepted_draft_tokens"] / stats["num_spec_steps"]
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="default",position="0"}'):
        assert name in text


@pytest.mark.parametrize("argv, says", [
    (["serve", "--host", "0.0.0.0", "--api-key-env", "SPECCHAT_TEST_NO_SUCH_KEY"], "not a loopback address"),
    (["serve", "--profile", "smollm2-transformers"], "llama.cpp (GGUF) profiles only"),
])
def test_what_serve_refuses_to_start(argv, says, capsys, monkeypatch):
    from specchat.cli import main

    monkeypatch.delenv("SPECCHAT_TEST_NO_SUCH_KEY", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_with_a_key_every_path_but_health_asks_for_it(served):
    from specchat.serve.http import make_server

    service, *_ = served
    keyed = make_server(dataclasses.replace(service, api_key="s3cret"), "127.0.0.1", 0, quiet=True)
    threading.Thread(target=keyed.serve_forever, daemon=True).start()
    port = keyed.server_address[1]
    try:
        assert request(port, "GET", "/health")[0] == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            status, data = request(port, "GET", "/v1/models", headers=headers)
            assert status == 401 and json.loads(data)["error"]["code"] == 401
        assert request(port, "POST", "/v1/chat/completions", chat(PROMPTS[1]))[0] == 401
        status, data = request(port, "GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and json.loads(data)["data"][0]["id"] == "default"
    finally:
        keyed.shutdown()
        keyed.server_close()


def test_bad_requests_get_one_json_line(served):
    service, port, *_ = served
    cases = [
        ("/v1/chat/completions", b"{not json", 400, "not valid JSON"),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "'messages'"),
        ("/v1/chat/completions", chat("hi", temperature=-1), 400, "temperature"),
        ("/v1/chat/completions", chat("hi", max_tokens=0), 400, "max_tokens"),
        ("/v1/chat/completions", chat("hi", stop=[""]), 400, "'stop' must be"),
        ("/v1/completions", {"prompt": "hello " * (service.room + 10)}, 400, f"at most {service.room} tokens"),
        ("/v1/nowhere", {}, 404, "no such path"),
    ]
    for path, body, want, says in cases:
        status, data = request(port, "POST", path, body)
        error = json.loads(data)["error"]
        assert status == want and says in error["message"] and "\n" not in error["message"], (path, data)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # too large: refused unread
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Length", str(2 << 20))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and "at most" in json.loads(response.read())["error"]["message"]
    conn.close()


def finished(port: int, reason: str) -> float:
    status, data = request(port, "GET", "/metrics")
    line = next((x for x in data.decode().splitlines()
                 if x.startswith("vllm:request_success_total") and f'finished_reason="{reason}"' in x), None)
    return float(line.rsplit(" ", 1)[1]) if line else 0.0


def test_a_stop_string_ends_the_reply_before_it_streamed_or_not(served):
    """The reply is the greedy reply up to the stop string (taken from that reply's third
    word), finish_reason "stop", in a body and in a stream; the request's slot is
    cancelled yet /metrics counts it as stopped, not aborted."""
    service, port, solo, *_ = served
    prompt = PROMPTS[2]
    text = service.chat.tokenizer.decode(solo[prompt], skip_special_tokens=True)
    stop = " " + text.split()[2]
    want = text[:text.index(stop)]
    stopped, aborted_before = finished(port, "stop"), finished(port, "abort")
    status, data = request(port, "POST", "/v1/chat/completions", chat(prompt, stop=[stop, "never appears"]))
    choice = json.loads(data)["choices"][0]
    assert status == 200 and choice["message"]["content"] == want and choice["finish_reason"] == "stop"
    events = stream(port, chat(prompt, stop=stop))
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
    assert content == want and streamed_ids(events)[1] == "stop"
    deadline = time.time() + 10
    while finished(port, "stop") < stopped + 2 and time.time() < deadline:
        time.sleep(0.05)
    assert finished(port, "stop") == stopped + 2 and finished(port, "abort") == aborted_before


def test_a_client_that_leaves_before_its_whole_reply_is_cancelled_at_once(served):
    """A non-streamed request for a long reply whose client closes the connection is
    aborted within a few steps, not decoded to its end (4096 tokens here) for nobody.
    Planted bug: only noticing when the reply is written fails this."""
    service, port, *_ = served
    before = aborted(port)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat(LONG, 4096)).encode(),
                 {"Content-Type": "application/json"})
    deadline = time.monotonic() + 30
    while not service.batch.running and time.monotonic() < deadline:
        time.sleep(0.02)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 10
    while (aborted(port) == before or service.batch.running) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert aborted(port) == before + 1 and not service.batch.running


def test_a_queued_request_whose_client_leaves_is_cancelled_before_it_runs(served):
    """Both slots busy with long streams, a third (whole-reply) request waits for a slot;
    its client closes the connection. It is cancelled while it waits (aborted within a
    second), so it never takes a slot from the chats still being served. Planted bug:
    waiting on the handle without asking whether the client is there fails this."""
    service, port, *_ = served
    before = aborted(port)
    streams = []
    for _ in range(2):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps({**chat(LONG, 4096), "stream": True}).encode(),
                     {"Content-Type": "application/json"})
        sock = conn.sock  # http.client lets go of it once the response begins
        response = conn.getresponse()
        response.readline()  # decoding
        streams.append((sock, response))
    queued = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    queued.request("POST", "/v1/chat/completions", json.dumps(chat(LONG, 8)).encode(),
                   {"Content-Type": "application/json"})
    time.sleep(0.3)
    assert service.batch.running == 3
    queued.sock.shutdown(socket.SHUT_RDWR)
    queued.close()
    deadline = time.monotonic() + 5
    while aborted(port) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    waited = 5 - (deadline - time.monotonic())
    assert aborted(port) == before + 1 and service.batch.running == 2 and waited < 1.5, waited
    for sock, response in streams:  # the long chats go away too
        sock.shutdown(socket.SHUT_RDWR)
        response.close()
    deadline = time.monotonic() + 30
    while service.batch.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert aborted(port) == before + 3
