"""Chunks → steps with provenance: llama-server's cumulative draft counters (tables
written from tools/server's chunk format) and vLLM's one-chunk-per-step stream
(fixtures written from vLLM's documented OpenAI-compatible format: vLLM cannot run here)."""

from __future__ import annotations

import json

import pytest

from specchat.remote.llama_server_steps import MalformedChunk, StepBuilder
from specchat.remote.vllm import chunk_step, chunk_tokens
from specchat.telemetry import Telemetry
from tests.support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "vllm"


def chunk(n, tok, d=0, a=0, ms=0.0, text="x"):
    timings = {"prompt_n": 5, "prompt_ms": 7.0, "predicted_n": n, "predicted_ms": ms}
    if d:
        timings |= {"draft_n": d, "draft_n_accepted": a}
    return {"content": text, "tokens": [tok], "stop": False, "tokens_predicted": n, "timings": timings}


def build(chunks, final=None):
    b = StepBuilder(num_speculative_tokens=4)
    steps = [s for c in chunks for s in b.feed(c)]
    if final:
        steps += b.feed(final)
    return steps + b.finish(), b


def kinds(steps):
    return [[t.kind for t in s.tokens] for s in steps]


def test_llama_server_counter_changes_open_verification_steps():
    # plain, then 4/4 (all kept: 4 accepted + bonus), then plain, then 8/6 (2 kept + resampled)
    chunks = [chunk(1, 10, ms=1), chunk(2, 11, 4, 4, ms=3)] + [chunk(n, 10 + n, 4, 4, ms=3) for n in range(3, 7)]
    chunks += [chunk(7, 17, 4, 4, ms=4), chunk(8, 18, 8, 6, ms=6), chunk(9, 19, 8, 6, ms=6), chunk(10, 20, 8, 6, ms=6)]
    final = {"content": "", "tokens": [], "stop": True, "stop_type": "eos", "tokens_predicted": 10,
             "timings": {"draft_n": 8, "draft_n_accepted": 6}}
    steps, b = build(chunks, final)
    assert kinds(steps) == [["target"], ["accepted"] * 4 + ["bonus"], ["target"], ["accepted"] * 2 + ["resampled"]]
    assert [(s.stats.num_draft_tokens, s.stats.num_accepted_tokens) for s in steps] == [(0, 0), (4, 4), (0, 0), (4, 2)]
    assert [t.id for s in steps for t in s.tokens] == [c["tokens"][0] for c in chunks]
    assert steps[-1].finish_reason == "eos" and b.finish_reason == "eos"
    assert steps[0].stats.prefill_ms == 7.0 and steps[0].stats.prefill_tokens == 5
    assert [s.stats.verify_ms for s in steps] == [1, 2, 1, 2]  # differences of cumulative predicted_ms
    t = Telemetry(max_gamma=4)
    for s in steps:
        t.update(s.stats, len(s.tokens))
    m = t.snapshot()
    assert (m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens) == (2, 8, 6)
    assert m.acceptance_histogram == (0, 0, 1, 0, 1) and m.mean_acceptance_length == 4.0


def test_llama_server_rejected_first_draft_is_one_resampled_token():
    steps, _ = build([chunk(1, 1, 3, 0), chunk(2, 2, 3, 0)])
    assert kinds(steps) == [["resampled"], ["target"]]


def test_llama_server_held_back_utf8_token_is_counted_with_id_minus_one():
    steps, _ = build([chunk(1, 5), chunk(3, 7, text="é")])  # token 2 ended inside a UTF-8 sequence
    assert [(t.id, t.text) for s in steps for t in s.tokens] == [(5, "x"), (-1, ""), (7, "é")]


def test_llama_server_stop_mid_step_keeps_the_servers_accepted_count():
    steps, _ = build([chunk(1, 1, 4, 4), chunk(2, 2, 4, 4)])
    assert kinds(steps) == [["accepted", "accepted"]] and steps[0].stats.num_accepted_tokens == 4


@pytest.mark.parametrize("bad", [
    {"tokens": "x", "tokens_predicted": 1},
    {"tokens": [1], "tokens_predicted": 1, "timings": {"draft_n": -1}},
    {"tokens": [1], "tokens_predicted": 1, "content": 3},
    {"tokens": [1]},
    [1, 2],
])
def test_llama_server_malformed_chunks_are_refused(bad):
    with pytest.raises(MalformedChunk):
        StepBuilder().feed(bad)


def vllm_fixture(name):
    return [json.loads(line[5:]) for line in (FIXTURES / name).read_text().splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


def test_vllm_fixture_chunks_become_steps_by_token_count():
    steps, reasons = [], []
    for c in vllm_fixture("chat_stream_spec.sse"):
        tokens, reason = chunk_tokens(c)
        reasons.append(reason)
        if tokens:
            steps.append(chunk_step(tokens, gamma=3, ms=1.0))
    assert kinds(steps) == [["resampled"], ["accepted"] * 3 + ["bonus"], ["accepted", "resampled"]]
    assert "".join(t.text for s in steps for t in s.tokens) == "Hello! How can I help?"
    assert steps[1].tokens[0].p == pytest.approx(0.9048, abs=1e-3)
    assert reasons == [None, None, None, "stop", None]  # the last chunk: usage only


def test_vllm_fixture_without_speculation_is_all_target_tokens():
    tokens, _ = chunk_tokens(vllm_fixture("chat_stream_spec.sse")[2])
    assert [t.kind for t in chunk_step(tokens, gamma=0, ms=1.0).tokens] == ["target"] * 4


def test_vllm_fixture_text_not_spelled_by_logprobs_goes_on_the_last_token():
    c = {"choices": [{"index": 0, "delta": {"content": "é"},
                      "logprobs": {"content": [{"token": "bytes:\\xc3", "logprob": -0.1},
                                               {"token": "bytes:\\xa9", "logprob": -0.2}]}}]}
    tokens, _ = chunk_tokens(c)
    assert [t for t, _ in tokens] == ["", "é"]


@pytest.mark.parametrize("bad", [{"choices": 3}, {"choices": [5]}, {"choices": [{"delta": {"content": 1}}]},
                                 {"choices": [{"delta": {}, "logprobs": {"content": [1]}}]}])
def test_vllm_fixture_malformed_chunks_are_refused(bad):
    with pytest.raises(MalformedChunk):
        chunk_tokens(bad)


# --- the vLLM client end to end, on a loopback server that replays the fixture -----------


@pytest.fixture
def vllm_fixture_server():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    requests = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/metrics":  # zero before the chat's request, the fixture after it
                body = (FIXTURES / "metrics_after.txt").read_bytes() if requests else b""
            else:
                body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            requests.append((self.headers.get("Authorization"),
                             json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            body = (FIXTURES / "chat_stream_spec.sse").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()
    server.server_close()


def test_vllm_fixture_chat_yields_the_usual_events_and_sends_the_key(vllm_fixture_server, tmp_path, monkeypatch):
    from specchat.config import load_profile
    from specchat.events import StepEvent, TurnFinished
    from specchat.remote import open_chat

    url, requests = vllm_fixture_server
    path = tmp_path / "v.toml"
    path.write_text(f'[target]\nbackend = "vllm"\nurl = "{url}"\napi_key_env = "T_VLLM_KEY"\n'
                    '[speculation]\nnum_speculative_tokens = 3\n')
    monkeypatch.setenv("T_VLLM_KEY", "secret-123")
    chat, info = open_chat(load_profile(path))
    events = list(chat.send("hi"))
    steps = [e.step for e in events if isinstance(e, StepEvent)]
    finished = events[-1]
    assert isinstance(finished, TurnFinished) and finished.finish_reason == "eos"
    assert finished.text == "Hello! How can I help?"
    turn = finished.metrics["turn"]
    assert (turn["num_drafts"], turn["num_draft_tokens"], turn["num_accepted_tokens"]) == (3, 9, 4)
    assert list(turn["acceptance_histogram"][:4]) == [1, 1, 0, 1]
    assert requests[0][0] == "Bearer secret-123" and requests[0][1]["logprobs"] is True
    assert "secret-123" not in json.dumps(info) and len(steps) == 3
    # the server's own counters across the turn, beside specchat's inferred per-step ones
    assert finished.metrics["server"] == {"num_drafts": 3, "num_draft_tokens": 9, "num_accepted_tokens": 4,
                                          "accepted_per_position": [2, 1, 1]}
