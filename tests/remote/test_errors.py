"""Every way a request to a server fails is one line that names the URL without its
password (and, when the environment's proxy is what failed, names the proxy): refused,
no answer within the timeout, an HTTP error status, TLS spoken to a plain-HTTP port,
a proxy that is down, an answer over the size cap. Real sockets on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest

from tests.support.hostile_server import HostileServer

PASSWORD = "pw-8086"
ESCAPES = "\x1b]0;pwned\x07"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_proxy_variables(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def failure(url: str, path: str = "/health") -> str:
    from specchat.remote.http import Endpoint, RemoteError

    with pytest.raises(RemoteError) as caught:
        Endpoint(url, connect_timeout=2.0, read_timeout=0.5).get_json(path)
    line = str(caught.value)
    assert "\n" not in line and "\x1b" not in line and "pwned" not in line and PASSWORD not in line
    return line


def with_password(url: str) -> str:
    return url.replace("://", f"://admin:{PASSWORD}@")


def test_refused(no_proxy_variables):
    port = free_port()
    line = failure(with_password(f"http://127.0.0.1:{port}"))
    assert line.startswith(f"cannot reach the server at http://***@127.0.0.1:{port}: Connection refused — ")


def test_no_answer_within_the_timeout(no_proxy_variables, silent_port):
    line = failure(with_password(f"http://127.0.0.1:{silent_port}"))
    assert line.startswith(f"no answer from http://***@127.0.0.1:{silent_port}/health within the timeout — ")


def test_an_error_status_quotes_the_servers_message_inert(no_proxy_variables):
    server = HostileServer({"/health": (503, {"error": {"message": f"{ESCAPES}loading model"}})})
    try:
        line = failure(with_password(server.url))
    finally:
        server.close()
    assert line == f"{with_password(server.url).replace(f'admin:{PASSWORD}', '***')}/health answered HTTP 503: loading model"


def test_tls_spoken_to_a_plain_http_port(no_proxy_variables):
    server = HostileServer({})
    try:
        url = with_password(server.url.replace("http://", "https://"))
        line = failure(url)
    finally:
        server.close()
    port = server.url.rsplit(":", 1)[1]
    assert line.startswith(f"cannot reach the server at https://***@127.0.0.1:{port}: TLS: ") and "http or https" in line


def test_a_proxy_that_is_down_is_named(no_proxy_variables, monkeypatch):
    proxy_port = free_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
    line = failure(with_password("http://llm.example.test:8080"))
    assert line.startswith(f"cannot reach the proxy at 127.0.0.1:{proxy_port} (for http://***@llm.example.test:8080): "
                           "Connection refused — check HTTP_PROXY")


def test_an_answer_over_the_cap_is_refused_not_held(no_proxy_variables, monkeypatch):
    import specchat.remote.http as remote_http

    monkeypatch.setattr(remote_http, "MAX_BODY", 1 << 20)
    server = HostileServer({"/health": (200, b"[" + b"0," * (1 << 20) + b"0]")})
    try:
        line = failure(server.url)
    finally:
        server.close()
    assert line == f"{server.url}/health: the answer is over 1 MiB"
