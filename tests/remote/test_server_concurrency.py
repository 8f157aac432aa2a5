"""llama-server under concurrency: the ``-np N`` peer rows and the remote slot check.

A real llama-server (``make llama-server``) on the embedded SmolLM2 GGUF serves three
short requests to two closed-loop clients: the third is sent only once a client is
free, and at temperature 0 the replies equal those of a one-slot server (each slot
holds its own context, so sharing a batch changes no sequence). Its own n-gram
speculation reports drafts. ``check_concurrency`` refuses a server with fewer slots
than asked for in one line, and passes a server without ``/props`` (vLLM); a remote
bench at concurrency 2 keeps two streams open on a two-slot server.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from tests.support.llama_server_helpers import REPEAT_PROMPT, Server, llama_server, server_dir
from tests.support.needs import LLAMA_SERVER_NOT_BUILT, embedded_llama_backend, llama_cpp

BIN = server_dir()
pytestmark = pytest.mark.skipif(BIN is None or llama_cpp is None, reason=LLAMA_SERVER_NOT_BUILT)

PROMPTS = ["Why is the sky blue?", "Write a short story about a fox and a crow.", REPEAT_PROMPT]
TOKENS = 16


@pytest.fixture(scope="module")
def setup():
    from specchat.bench.runner import Request
    from specchat.config import load_profile
    from specchat.loading.gguf_tokenizer import GgufTokenizer

    backend = embedded_llama_backend(max_ctx=1024)
    tokenizer = GgufTokenizer(backend.llm)
    requests = [Request("s", f"p{i}", 0, i, tuple(tokenizer.apply_chat_template([{"role": "user", "content": text}])),
                        TOKENS) for i, text in enumerate(PROMPTS)]
    return SimpleNamespace(target=backend), load_profile("default"), requests


@pytest.fixture(scope="module")
def peer(setup):
    from specchat.bench.peer_server_concurrent import ConcurrentServerPeer

    loaded, profile, _ = setup
    peer = ConcurrentServerPeer(loaded, profile, stops=set())
    yield peer
    peer.close()


def greedy(request):
    from specchat.engine import SamplingParams

    return SamplingParams(temperature=0.0)


def test_two_slots_serve_three_requests_closed_loop_as_one_slot_would(setup, peer):
    """Planted bugs: a client per request (the third would start at 0 ms), or slots that
    share one context (replies would part from the one-slot server's)."""
    _, _, requests = setup
    rows, wall_ms = peer.run("none", requests, greedy, 2)
    two = peer._server.proc
    assert [r.new_tokens for r in rows] == [TOKENS] * 3
    assert all(len(r.output_ids) == TOKENS and sum(n for _, n in r.emissions) == TOKENS for r in rows)
    assert rows[0].start_ms < 100 and rows[1].start_ms < 100  # both clients send at once
    freed = min(r.start_ms + r.wall_ms for r in rows[:2])
    assert rows[2].start_ms >= freed, rows  # the third waited for a free client
    assert wall_ms == pytest.approx(max(r.start_ms + r.wall_ms for r in rows))
    assert all(r.server_drafted is None for r in rows)  # plain: no speculation timings

    one, _ = peer.run("none", requests, greedy, 1)
    assert two.poll() is not None  # the two-slot server was stopped before the one-slot one started
    assert [r.output_ids for r in one] == [r.output_ids for r in rows]
    assert one[1].start_ms >= one[0].start_ms + one[0].wall_ms  # one client: one at a time


def test_its_own_ngram_speculation_drafts_under_two_slots(setup, peer):
    _, profile, requests = setup
    assert "--no-kv-unified" in peer.server_args("ngram", 2)
    rows, _ = peer.run("ngram", requests[1:], greedy, 2)
    assert [r.new_tokens for r in rows] == [TOKENS] * 2
    copy = rows[1]  # the prompt that asks for a repeat
    assert copy.server_drafted is not None and copy.server_drafted > 0, copy
    assert copy.server_accepted is not None


def test_a_server_that_will_not_start_is_one_line(setup, tmp_path):
    from specchat.bench.peer_server_concurrent import ConcurrentServerPeer
    from specchat.errors import SpecchatError

    loaded, profile, requests = setup
    peer = ConcurrentServerPeer(loaded, profile, stops=set())
    bad = tmp_path / "bad\x1b]0;x\x07.gguf"
    bad.write_bytes(b"not a gguf")
    peer.model_path = str(bad)
    try:
        with pytest.raises(SpecchatError) as error:
            peer.run("none", requests[:1], greedy, 2)
    finally:
        peer.close()
    text = str(error.value)
    assert "llama-server exited" in text and "-np 2" in text and "\n" not in text and "\x1b" not in text
    assert error.value.hint == "run with --no-peer to skip the llama-server rows"


def test_check_concurrency_refuses_a_server_with_fewer_slots(setup, tmp_path):
    from specchat.remote.http import RemoteError
    from specchat.remote.bench import check_concurrency

    loaded, _, _ = setup
    server = llama_server(BIN, loaded.target.model_path, tmp_path / "server.log")  # -np 1
    try:
        check_concurrency(server.url, 1)
        with pytest.raises(RemoteError) as error:
            check_concurrency(server.url, 4)
    finally:
        server.stop()
    assert str(error.value) == (f"the server at {server.url} has 1 parallel slots; --concurrency 4 needs 4 "
                                "— start llama-server with -np N, or lower --concurrency")


class NoProps(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 — http.server's name
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_server_without_props_batches_by_itself():
    """vLLM answers /props with 404: no slot count, no refusal."""
    from specchat.remote.bench import check_concurrency

    server = ThreadingHTTPServer(("127.0.0.1", 0), NoProps)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        check_concurrency(url, 8)  # no slot count: no refusal
    finally:
        server.shutdown()
        server.server_close()


def test_remote_bench_keeps_two_streams_open_on_a_two_slot_server(setup, tmp_path):
    from specchat.bench.prompt_sets import Prompt, PromptSet
    from specchat.config import load_profile
    from specchat.remote.bench import remote_bench, table
    from specchat.remote.http import RemoteError

    loaded, _, _ = setup
    server = Server(BIN / "llama-server", ["-m", loaded.target.model_path, "-t", "1", "-c", "2048", "-np", "2"],
                    tmp_path / "server.log")
    path = tmp_path / "remote.toml"
    path.write_text(f'[target]\nbackend = "llama-server"\nurl = "{server.url}"\n[sampling]\ntemperature = 0.0\n')
    prompts = PromptSet("s", "", 12, tuple(Prompt(f"p{i}", text) for i, text in enumerate(PROMPTS)), "test")
    try:
        results = remote_bench(load_profile(str(path)), [prompts], plain_url=None, concurrency=2, say=lambda _: None)
        with pytest.raises(RemoteError, match="has 2 parallel slots; --concurrency 3 needs 3"):
            remote_bench(load_profile(str(path)), [prompts], plain_url=None, concurrency=3, say=lambda _: None)
    finally:
        server.stop()
    rows = results["rows"]
    assert [r["prompt"] for r in rows] == ["p0", "p1", "p2"] and all(r["tokens"] > 0 for r in rows)
    assert rows[1]["start_ms"] < rows[0]["wall_ms"]  # the second stream opened while the first was running
    assert rows[2]["start_ms"] >= min(r["start_ms"] + r["wall_ms"] for r in rows[:2])
    summary = results["summary"]["speculative"]
    assert results["concurrency"] == 2 and summary["throughput_tokens_per_s"] > 0
    assert "2 streams at once" in table(results)
