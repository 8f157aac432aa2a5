"""bench's llama-server peer streams through the bounded client (remote/http.py), with
each chunk's tokens stamped as they arrive (issue 58, item 8). A fake /completion on
127.0.0.1 sends chunks apart in time, an endless line, an error line. Planted bugs:
stamping after the whole body was read (every emission at the end), or the peer's own
unbounded reader (it buffers the endless line whole)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specchat.bench.peer_llama_server import ServerProcess, stream_completion
from specchat.errors import SpecchatError

GAP_S = 0.3


class Fake(BaseHTTPRequestHandler):
    mode = "chunks"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["stream"] and body["return_tokens"] and body["prompt"] == [1, 2]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.mode == "endless":
            self.wfile.write(b"data: " + b"x" * (2 << 20))
            return
        if self.mode == "error":
            self.wfile.write(b'error: {"message": "slot unavailable"}\n\n')
            return
        for ids in ([5], [6, 7]):
            self.wfile.write(b"data: " + json.dumps({"tokens": ids}).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(GAP_S)
        final = {"tokens": [], "stop": True, "stop_type": "eos", "timings": {"draft_n": 2, "draft_n_accepted": 1}}
        self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\n")


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield ServerProcess(None, f"http://127.0.0.1:{httpd.server_address[1]}", None)
    httpd.shutdown()


def test_each_chunk_is_stamped_as_it_arrives(server):
    got = stream_completion(server, {"prompt": [1, 2]}, stops=set())
    assert got.output_ids == [5, 6, 7] and got.finish_reason == "eos" and got.timings["draft_n"] == 2
    (first, n1), (second, n2) = got.emissions
    assert (n1, n2) == (1, 2) and first < GAP_S * 1000 / 2 and second - first >= GAP_S * 1000 * 0.9
    assert got.end_ms >= second + GAP_S * 1000 * 0.9


@pytest.mark.parametrize("mode, words", [("endless", "a line over"), ("error", "slot unavailable")])
def test_a_broken_stream_is_one_line_for_the_peer_row(server, mode, words, monkeypatch):
    monkeypatch.setattr(Fake, "mode", mode)
    with pytest.raises(SpecchatError) as info:
        stream_completion(server, {"prompt": [1, 2]}, stops=set())
    line = str(info.value)
    assert "\n" not in line and line.startswith("llama-server failed mid-request:") and words in line, line
