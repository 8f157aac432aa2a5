"""A proxy set in the environment is used for a remote server, NO_PROXY bypasses it, and
a server on loopback is always reached directly (a proxy cannot reach this machine's
loopback, and would see the key). The proxy is a stub on 127.0.0.1 that records each
request and forwards it to the loopback stand-in; the remote server's name,
``llm.example.test`` (a reserved name that never resolves), resolves to the stand-in
only through a hosts entry this test adds, so a request that reached the stand-in
named it either way and the stub's record alone says which road it took."""

from __future__ import annotations

import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from tests.support.hostile_server import HostileServer, vllm_profile, vllm_routes

NAME = "llm.example.test"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class ProxyStub:
    """A forward proxy for plain-http absolute-URI requests (``GET http://host:port/path``):
    it keeps each URI it was asked for and relays the request to ``upstream`` whatever
    host the URI names."""

    def __init__(self, upstream: str) -> None:
        self.uris: list[str] = []
        target = urlsplit(upstream)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._relay()

            def do_POST(self):
                self._relay()

            def _relay(self):
                stub.uris.append(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = urlsplit(self.path)
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
                conn.request(self.command, parts.path + (f"?{parts.query}" if parts.query else ""), body, headers)
                answer = conn.getresponse()
                data = answer.read()
                conn.close()
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture
def stand_in(monkeypatch):
    """The vLLM stand-in on loopback, a proxy stub in front of it, no proxy variable
    from the machine, and a hosts entry: ``NAME`` is the stand-in's address."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    resolve = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, *args, **kw: resolve("127.0.0.1" if host == NAME else host, *args, **kw))
    server = HostileServer(vllm_routes())
    proxy = ProxyStub(server.url)
    yield server, proxy
    proxy.close()
    server.close()


def chat_through(tmp_path, url: str) -> str:
    """One turn with the vLLM at ``url``; the reply's text."""
    from specchat.config import load_profile
    from specchat.events import ErrorEvent, TurnFinished
    from specchat.remote import open_chat

    chat, _ = open_chat(load_profile(str(vllm_profile(tmp_path, url))))
    events = list(chat.send("hi"))
    assert not [e for e in events if isinstance(e, ErrorEvent)], events
    assert isinstance(events[-1], TurnFinished)
    return events[-1].text


def remote_url(server) -> str:
    return server.url.replace("127.0.0.1", NAME)


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_in_the_environment_carries_every_request_to_a_remote_server(stand_in, tmp_path, monkeypatch,
                                                                           variable):
    server, proxy = stand_in
    monkeypatch.setenv(variable, proxy.url)
    assert chat_through(tmp_path, remote_url(server))
    paths = [r.path for r in server.requests]
    assert "/v1/chat/completions" in paths
    assert proxy.uris == [remote_url(server) + path for path in paths]  # each one, asked for by its absolute URI


def test_no_proxy_names_a_server_reached_directly(stand_in, tmp_path, monkeypatch):
    server, proxy = stand_in
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", f"other.example.test,{NAME}")
    assert chat_through(tmp_path, remote_url(server))
    assert proxy.uris == [] and server.requests
    assert {r.headers["Host"] for r in server.requests} == {urlsplit(remote_url(server)).netloc}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_server_on_loopback_is_reached_directly_even_without_no_proxy(stand_in, tmp_path, monkeypatch, host):
    server, proxy = stand_in
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    assert chat_through(tmp_path, server.url.replace("127.0.0.1", host))
    assert proxy.uris == [] and server.requests
