"""Cancel never waits for the network: against a real server on 127.0.0.1 that
trickles a byte a second, goes silent mid-stream, or never sends its headers (a long
prefill), ``cancel()`` from another thread (the UI's Esc) ends the turn within a
second, and the recording closes the turn."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.hostile_server import vllm_profile

CHUNK = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}


class SlowServer:
    """vLLM's routes, with a chat stream that sends one chunk, then ``mode``: "trickle"
    (one space a second, never a newline) or "silent" (nothing), until the client leaves;
    or, in "prefill", not even the headers (``posted`` is set once the request is in)."""

    def __init__(self, mode: str) -> None:
        self.stop = threading.Event()
        self.posted = threading.Event()

        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
                if self.path == "/metrics":
                    body = b""
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posted.set()
                if mode == "prefill":
                    outer.stop.wait()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(f"data: {json.dumps(CHUNK)}\n\n".encode())
                self.wfile.flush()
                while not outer.stop.wait(1.0):
                    if mode == "trickle":
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self._http.shutdown()
        self._http.server_close()


@pytest.mark.parametrize("mode", ["trickle", "silent", "prefill"])
def test_cancel_abandons_a_slow_stream_at_once_and_the_turn_is_closed(tmp_path, mode):
    from specchat.config import load_profile
    from specchat.events import StepEvent, TurnFinished
    from specchat.remote import open_chat
    from specchat.sessions.reader import read_recording
    from specchat.sessions.recorder import Recorder, build_header
    from specchat.sessions.recording_backend import RecordingBackend

    server = SlowServer(mode)
    try:
        profile = load_profile(str(vllm_profile(tmp_path, server.url)))
        chat, info = open_chat(profile)
        recorder = Recorder.for_profile(profile, directory=tmp_path / "sessions")
        recorder.start(build_header(profile, info))
        backend = RecordingBackend(chat, recorder)
        events, first = [], threading.Event()

        def consume():
            for event in backend.send("hi"):
                events.append(event)
                if isinstance(event, StepEvent):
                    first.set()

        worker = threading.Thread(target=consume, daemon=True)
        worker.start()
        if mode == "prefill":  # cancel while the reply's headers are awaited
            assert server.posted.wait(10), "the request never arrived"
        else:
            assert first.wait(10), "the server's first chunk never arrived"
        time.sleep(0.3)  # the reader is blocked on the socket now
        start = time.monotonic()
        backend.cancel()
        worker.join(5)
        waited = time.monotonic() - start
        recorder.close()
    finally:
        server.close()
    assert not worker.is_alive() and waited < 1.0, f"cancel took {waited:.1f} s"
    assert isinstance(events[-1], TurnFinished) and events[-1].finish_reason == "cancelled", events[-1]
    recording = read_recording(recorder.path)
    assert recording.damage is None
    last = recording.events[-1].event
    assert isinstance(last, TurnFinished) and last.finish_reason == "cancelled"
    assert last.text == ("" if mode == "prefill" else "Hi")


class Unanswering:
    """A port on 127.0.0.1 that never answers: "syn" — its accept queue is full, so a
    connect waits for the handshake (the kernel drops the SYN); "headers" — connections
    are made (the kernel queues them) but nothing is ever read or sent back."""

    def __init__(self, mode: str) -> None:
        import socket

        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0 if mode == "syn" else 64)
        self.port = self.listener.getsockname()[1]
        self.fillers = []
        if mode == "syn":
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                try:
                    filler.connect(("127.0.0.1", self.port))
                except BlockingIOError:
                    pass
                self.fillers.append(filler)
            time.sleep(0.2)

    def close(self) -> None:
        for s in (*self.fillers, self.listener):
            s.close()


@pytest.mark.parametrize("mode", ["syn", "headers"])
def test_cancel_while_connecting_closes_the_turn_at_once(tmp_path, mode):
    """Esc while the turn's first request has no connection yet (a SYN left unanswered)
    or no answer yet (a server that never sends its headers: the GET of its counters
    before the stream is not a stream, so abort() cannot shut it). Planted bug: making
    the requests on the turn's own thread (as before) holds the turn for the connect
    timeout (5 s, twice) or the read timeout (120 s)."""
    from specchat.config import load_profile
    from specchat.events import TurnFinished
    from specchat.remote import open_chat
    from specchat.remote.http import Endpoint
    from specchat.sessions.reader import read_recording
    from specchat.sessions.recorder import Recorder, build_header
    from specchat.sessions.recording_backend import RecordingBackend

    server, unanswering = SlowServer("silent"), Unanswering(mode)
    try:
        profile = load_profile(str(vllm_profile(tmp_path, server.url)))
        chat, info = open_chat(profile)
        # from here on the server stops answering (open_chat's own requests would hang)
        chat.endpoint = Endpoint(f"http://127.0.0.1:{unanswering.port}")
        recorder = Recorder.for_profile(profile, directory=tmp_path / "sessions")
        recorder.start(build_header(profile, info))
        backend = RecordingBackend(chat, recorder)
        events = []
        worker = threading.Thread(target=lambda: events.extend(backend.send("hi")), daemon=True)
        worker.start()
        time.sleep(0.5)  # inside the first request now
        start = time.monotonic()
        backend.cancel()
        worker.join(15)
        waited = time.monotonic() - start
        recorder.close()
    finally:
        server.close()
        unanswering.close()
    assert not worker.is_alive() and waited < 1.0, f"cancel took {waited:.1f} s"
    assert isinstance(events[-1], TurnFinished) and events[-1].finish_reason == "cancelled", events[-1]
    recording = read_recording(recorder.path)
    assert recording.damage is None
    last = recording.events[-1].event
    assert isinstance(last, TurnFinished) and last.finish_reason == "cancelled"


def test_cancel_while_the_counters_after_a_reply_are_read_closes_the_turn_at_once(tmp_path):
    """The reply has ended (here: an empty one); the server then never answers the GET of
    its counters that closes the turn. Planted bug: reading them on the turn's thread
    holds Esc until that request's read timeout (120 s; 60 s in this stand-in)."""
    from specchat.config import load_profile
    from specchat.events import TurnFinished
    from specchat.remote import open_chat

    server = SlowServer("silent")
    try:
        chat, info = open_chat(load_profile(str(vllm_profile(tmp_path, server.url))))
        chat.stream_steps = lambda messages: iter([])
        first_read = chat.server_counters
        asked_after = threading.Event()
        calls = []

        def counters():
            calls.append(1)
            if len(calls) == 1:  # before the turn: answered
                return first_read()
            asked_after.set()
            time.sleep(60)  # after it: never answered

        chat.server_counters = counters
        events = []
        worker = threading.Thread(target=lambda: events.extend(chat.send("hi")), daemon=True)
        worker.start()
        assert asked_after.wait(10), "the turn never asked for the counters after it"
        start = time.monotonic()
        chat.cancel()
        worker.join(5)
        waited = time.monotonic() - start
    finally:
        server.close()
    assert not worker.is_alive() and waited < 1.0, f"cancel took {waited:.1f} s"
    assert isinstance(events[-1], TurnFinished) and "server" not in events[-1].metrics
