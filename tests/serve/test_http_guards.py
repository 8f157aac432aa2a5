"""serve's HTTP guards, on a stand-in service (no model): what the key covers and what
reaches the operator's terminal.

* With a key, every route but /health asks for it, /metrics included (a GET or POST on
  each path, known or not). Planted bug: /metrics answered without the key — caught.
* A request line holding an OSC sequence (``ESC ] … BEL``) leaves no control byte on
  stderr: serve's own log method bypasses the standard library's escaping, so its
  ``clean_line`` is all that stands between a client and the terminal. Planted bug:
  ``clean_line(line)`` → ``line`` in ``_log`` — caught.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from specchat.serve import http as serve_http
from tests.support.mutations import mutant, patched

ROUTES = [("GET", "/health"), ("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/metrics?name=x"),
          ("GET", "/nowhere"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
          ("POST", "/nowhere")]


def stand_in(api_key: str | None) -> SimpleNamespace:
    """What the handler reads of a Service before a request reaches the engine."""
    return SimpleNamespace(api_key=api_key, model="stand-in", room=64, batch=SimpleNamespace(running=0),
                           metrics=SimpleNamespace(render=lambda running: "# no counters\n"))


@contextmanager
def serving(service, quiet: bool = True):
    server = serve_http.make_server(service, "127.0.0.1", 0, quiet=quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def status_of(port: int, method: str, path: str, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, b"{}" if method == "POST" else None, headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


def test_a_key_guards_every_route_but_health():
    with serving(stand_in("s3cret")) as port:
        for method, path in ROUTES:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                want = 200 if path == "/health" else 401
                assert status_of(port, method, path, headers) == want, (method, path, headers)
        # with the key, the routes answer as they would without one
        key = {"Authorization": "Bearer s3cret"}
        assert status_of(port, "GET", "/metrics", key) == 200 and status_of(port, "GET", "/nowhere", key) == 404


def test_planted_metrics_answered_without_the_key_is_caught():
    bug = mutant(serve_http.Handler._answer, [('self.path != "/health"', 'self.path not in ("/health", "/metrics")')])
    with patched(serve_http.Handler, "_answer", bug), pytest.raises(AssertionError):
        test_a_key_guards_every_route_but_health()


def test_a_request_line_with_escape_sequences_leaves_no_control_byte_on_stderr(capsys):
    with serving(stand_in(None), quiet=False) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"GET /\x1b]0;owned\x07\x1b[2J HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == 404
    err = capsys.readouterr().err
    assert '"GET /' in err and "404" in err, err  # the line was logged, cleaned
    assert not any(ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) < 0xa0 for c in err), repr(err)


def test_planted_log_line_not_cleaned_is_caught(capsys):
    bug = mutant(serve_http._log, [("clean_line(line)", "line")])
    with patched(serve_http, "_log", bug), pytest.raises(AssertionError):
        test_a_request_line_with_escape_sequences_leaves_no_control_byte_on_stderr(capsys)
