"""``specchat serve`` at its edges: one line, never a traceback, never a 5xx for what a
client sends. One real server (the default profile, embedded GGUF, ``--parallel 2``)
runs as a subprocess on a free loopback port; its whole stderr is read at the end.

* ``--parallel 300`` (more sequences than llama.cpp batches) is refused before the model
  loads: one line naming --parallel, each chat's share of n_ctx and the largest N that
  fits, exit 2. Planted bug: no check — the model loads and RuntimeError escapes. So
  are a port out of range, a host no socket can bind and a key no client could send.
* A lone surrogate (JSON ``"\\ud800"``) in a prompt or a message is the same 400 on
  /v1/completions and /v1/chat/completions. Planted bug: no check — completions 500s.
* A client that resets its connection mid-request-line or mid-stream leaves at most
  one log line, no traceback. Planted bug: socketserver's handle_error prints one.
* A stdlib client sends malformed, truncated, non-UTF-8 and surrogate-bearing bodies,
  bad headers, methods and request lines to every route: only 4xx, each one JSON line;
  50 more clients go away at random points (request half sent, reply half read,
  closed or reset). The server stays up: /health answers, a completion runs, no slot
  is left held, and stderr holds no traceback.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from tests.support import ROOT
from tests.support.cli import MAIN
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp
GENERATE = ("/v1/completions", "/v1/chat/completions")
ROUTES = ("/health", "/v1/models", "/metrics", *GENERATE)
TIMEOUT_S = 60.0
BODY_TIMEOUT_S = 2.0  # the server's wait for a body its Content-Length promised (30 s as shipped)
SERVE = f"import specchat.serve.http as http; http.BODY_TIMEOUT_S = {BODY_TIMEOUT_S}; {MAIN}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The server: (port, a function that reads its stderr so far)."""
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", SERVE, "serve", "--port", "0", "--parallel", "2"],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
    try:
        deadline = time.monotonic() + 180
        while "(Ctrl-C stops)" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        port = int(log.read_text(errors="replace").split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        yield SimpleNamespace(port=port, stderr=lambda: log.read_text(errors="replace"))
    finally:
        # SIGTERM (a service manager's stop) ends it as Ctrl-C does, in a second or two — also
        # started as here, from a process that may ignore SIGINT (an xdist worker, a shell's
        # background job), which it did not before (teardown then waited 30 s for nothing)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("specchat serve did not stop within 15 s of SIGTERM") from None
        assert code == 0 and "specchat serve: stopped" in log.read_text(errors="replace")


def raw(method: str, path: str, body: bytes | None = None, **headers: str) -> bytes:
    """An HTTP/1.1 request's bytes; a Content-Length for a body unless a header says otherwise."""
    head = {"Host": "127.0.0.1", "Connection": "close", **{k.replace("_", "-"): v for k, v in headers.items()}}
    if body is not None and "Content-Length" not in head and "Transfer-Encoding" not in head:
        head["Content-Length"] = str(len(body))
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in head.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def exchange(port: int, data: bytes, half_close: bool = True) -> tuple[int, bytes]:
    """Sends ``data``, reads the answer to its end: (status, body). ``half_close``: says it
    has sent all (a body shorter than its Content-Length ends there) — which the server
    also reads as a client gone, so a request that generates is sent without it."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1."):  # an HTTP/0.9 answer (a body alone), or none
        return 0, answer
    return int(head.split(b" ", 2)[1]), body


def one_json_line(body: bytes) -> str:
    message = json.loads(body)["error"]["message"]
    assert isinstance(message, str) and message and "\n" not in message
    return message


def new_lines(served, before: str) -> list[str]:
    return served.stderr()[len(before):].splitlines()


def wait_for(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def running(port: int) -> float:
    text = exchange(port, raw("GET", "/metrics"))[1].decode()
    return float(next(x for x in text.splitlines() if x.startswith("vllm:num_requests_running")).rsplit(" ", 1)[1])


def test_more_chats_than_llama_cpp_batches_is_one_line_before_the_model_loads(capsys, monkeypatch):
    import specchat.loading
    from specchat.cli import main

    def load_models(*args, **kwargs):
        raise AssertionError("the model was loaded for a --parallel that was never going to fit")

    monkeypatch.setattr(specchat.loading, "load_models", load_models)
    assert main(["serve", "--parallel", "300", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("specchat: error: --parallel 300 "), err
    assert "each chat would get 27 tokens (n_ctx 8192 / 300)" in err and "use --parallel 256 or fewer" in err


@pytest.mark.parametrize("argv, key, says", [
    (["--port", "70000"], None, "--port 70000 is not valid — use 0..65535"),
    (["--host", "no-such-host.invalid"], "k", "--host 'no-such-host.invalid' is not an address to listen on"),
    (["--host", "a\x00b"], "k", "--host 'a\\x00b' is not an address to listen on"),
    (["--host", "[::1]"], "k", "without brackets (--host ::1)"),
    ([], "sk\u201331415", "$SPECCHAT_TEST_KEY holds characters an HTTP header cannot carry (character 3 of 8 is "
                          "U+2013 EN DASH)"),
])
def test_values_for_a_socket_are_one_line_before_the_model_loads(argv, key, says, capsys, monkeypatch):
    import specchat.loading
    from specchat.cli import main

    def load_models(*args, **kwargs):
        raise AssertionError("the model was loaded before a value it could never use was refused")

    monkeypatch.setattr(specchat.loading, "load_models", load_models)
    monkeypatch.delenv("SPECCHAT_TEST_KEY", raising=False)
    if key is not None:
        monkeypatch.setenv("SPECCHAT_TEST_KEY", key)
    assert main(["serve", "--api-key-env", "SPECCHAT_TEST_KEY", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "31415" not in err, err


def test_a_lone_surrogate_is_the_same_400_on_both_endpoints(served):
    answers = [exchange(served.port, raw("POST", path, body)) for path, body in [
        ("/v1/completions", b'{"prompt": "hello \\ud800", "max_tokens": 2}'),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hello \\ud800"}], "max_tokens": 2}'),
    ]]
    messages = [one_json_line(body) for _, body in answers]
    assert [status for status, _ in answers] == [400, 400], answers
    assert messages[0].startswith("'prompt' holds a lone surrogate") and messages[1].startswith(
        "'messages[0].content' holds a lone surrogate"), messages
    assert messages[0].split(" holds ")[1] == messages[1].split(" holds ")[1]  # one message, its field named


def reset(sock: socket.socket) -> None:
    """Closes with an RST (SO_LINGER 0), as a client killed mid-request does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_that_reset_mid_request_or_mid_stream_leave_one_line_each(served):
    before = served.stderr()
    half = socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT_S)
    half.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Len")
    time.sleep(0.3)  # the server is reading the request line's headers
    reset(half)
    streaming = socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT_S)
    streaming.sendall(raw("POST", "/v1/completions", json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 2000, "stream": True}).encode()))
    assert streaming.recv(4096).startswith(b"HTTP/1.0 200")  # it streams
    reset(streaming)
    assert wait_for(lambda: sum("went away" in x for x in new_lines(served, before)) == 2), new_lines(served, before)
    assert wait_for(lambda: running(served.port) == 0)  # the stream's request was cancelled
    lines = new_lines(served, before)
    assert not any("Traceback" in x or "Exception occurred" in x or x.startswith(" ") for x in lines), lines


LONG = "hello " * 9000  # more tokens than a chat holds
SHORT_LENGTH = "100"  # a Content-Length the body falls short of
SHORT = f"Content-Length: {SHORT_LENGTH}\r\n".encode()


def bad_requests() -> list[tuple[bytes, int]]:
    """(a request's bytes, the status it must get) for every route."""
    cases: list[tuple[bytes, int]] = []
    bodies = [b"{not json", b"", b"[1, 2]", b'{"prompt": "caf\xe9"}', b"\xff\xfe\x00\x00", b"[" * 100_000,
              b'{"prompt": "\\udfff", "stop": "x"}', b'{"model": "\\ud800", "prompt": "hi"}',
              b'{"\\ud800": 1, "prompt": "hi"}', b'{"prompt": "hi", "stop": ["\\ud800"]}',
              b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udbff"}]}]}',
              b'{"prompt": 5}', b'{"messages": [{"role": "user", "content": 5}]}', b'{"messages": []}',
              b'{"prompt": "hi", "temperature": "hot"}', b'{"prompt": "hi", "temperature": 1e999}',
              b'{"prompt": "hi", "temperature": 1' + b"0" * 400 + b"}", b'{"prompt": "hi", "top_p": 1' + b"0" * 400 + b"}",
              b'{"prompt": "hi", "top_k": "x"}', b'{"prompt": "hi", "seed": -1}', b'{"prompt": "hi", "seed": "x"}',
              b'{"prompt": "hi", "seed": 1' + b"0" * 400 + b"}", b'{"prompt": "hi", "max_tokens": 0}',
              b'{"prompt": "hi", "max_tokens": "1"}', b'{"prompt": "hi", "max_tokens": 1e999}',
              b'{"prompt": "hi", "max_tokens": true}', b'{"prompt": "hi", "n": 2}', b'{"prompt": "hi", "stream": "yes"}',
              b'{"prompt": "hi", "stream_options": []}', b'{"prompt": "hi", "logprobs": "x"}',
              b'{"prompt": "hi", "stop": 7}', b'{"prompt": "hi", "stop": [null]}',
              json.dumps({"prompt": LONG, "messages": [{"role": "user", "content": LONG}]}).encode()]
    for path in GENERATE:
        cases += [(raw("POST", path, body), 400) for body in bodies]
        cases += [(raw("POST", path, b"{}", Content_Length=n), 411) for n in ("\u00b2", "abc", "-1", "")]
        cases += [(raw("POST", path, b"{}", Content_Length="9" * 5000), 413),
                  (raw("POST", path, b"{}", Content_Length=str(2 << 20)), 413),
                  (raw("POST", path, b"{}", Transfer_Encoding="chunked"), 411),
                  (raw("POST", path, b'{"prompt": "hi"}', Content_Length=SHORT_LENGTH), 400)]  # 16 bytes, then done
    for path in ROUTES:
        cases += [(raw(method, path, b"{}"), 405) for method in ("PUT", "DELETE", "PATCH", "OPTIONS", "FOO")]
        cases += [(raw("GET" if path in GENERATE else "POST", path, b"{}"), 404),
                  (raw("GET", path + "\xff\x00/x"), 404),
                  (f"GET {path} HTTP/2.0\r\n\r\n".encode(), 400),
                  (f"GET {path} HTTP/1.1\r\n".encode() + b"X-A: b\r\n" * 101 + b"\r\n", 431)]
    cases += [(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32)), 400),  # TLS spoken to HTTP
              (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414)]
    return cases


def good_requests() -> list[bytes]:
    gen = [{"prompt": "Once upon a time", "max_tokens": 8}, {"prompt": ["Tell me a joke."], "max_tokens": 8}]
    chat = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 8}
    out = [raw("POST", "/v1/completions", json.dumps({**b, "stream": s}).encode()) for b in gen for s in (False, True)]
    out += [raw("POST", "/v1/chat/completions", json.dumps({**chat, "stream": s}).encode()) for s in (False, True)]
    return out + [raw("GET", "/health"), raw("GET", "/v1/models"), raw("GET", "/metrics")]


def go_away(port: int, data: bytes, rng: random.Random) -> None:
    """A client that leaves at a random point: part of its request sent, or all of it and
    part of the answer read; closing (FIN) or resetting (RST)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    try:
        if rng.random() < 0.5:
            sock.sendall(data[:rng.randrange(len(data))])
        else:
            sock.sendall(data)
            want, got = rng.randrange(400), b""
            while len(got) < want and (chunk := sock.recv(want - len(got))):
                got += chunk
        time.sleep(rng.random() * 0.3)
    finally:
        reset(sock) if rng.random() < 0.5 else sock.close()


def test_nothing_a_client_sends_or_drops_reaches_a_5xx_or_a_traceback(served):
    before = served.stderr()
    bad = bad_requests()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda case: exchange(served.port, case[0]), bad))
    wrong = [(data[:80], want, status, body[:200]) for (data, want), (status, body) in zip(bad, answers)
             if status != want]
    assert wrong == []
    for status, body in answers:
        one_json_line(body)
    short = raw("POST", "/v1/completions", b'{"prompt": "hi"}', Content_Length=SHORT_LENGTH)
    started = time.monotonic()
    status, body = exchange(served.port, short, half_close=False)  # the rest never comes, the client waits
    assert status == 408 and "did not arrive" in one_json_line(body)
    assert time.monotonic() - started < BODY_TIMEOUT_S + 5

    rng = random.Random(45)
    # not the short body: its client, having sent it all, would wait BODY_TIMEOUT_S for a 408 (timed above)
    choices = good_requests() + [data for data, _ in bad if len(data) < 4096 and SHORT not in data]
    drops = [(rng.choice(choices), random.Random(rng.random())) for _ in range(50)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda drop: go_away(served.port, *drop), drops))

    assert wait_for(lambda: running(served.port) == 0), "a dropped client's request still holds a slot"
    assert exchange(served.port, raw("GET", "/health")) == (200, b'{"status": "ok"}')
    status, body = exchange(served.port, good_requests()[0], half_close=False)
    assert status == 200 and json.loads(body)["choices"][0]["finish_reason"] in ("stop", "length")
    lines = new_lines(served, before)
    assert sum("went away" in x for x in lines) <= len(drops)
    assert all(x.strip() for x in lines)  # whole lines: threads logging at once do not interleave
    assert not any("Traceback" in x or "Exception occurred" in x or "internal error" in x or x.startswith(" ")
                   for x in lines), [x for x in lines if " HTTP/1.1\" " not in x]
    assert served.stderr().count("Traceback") == 0
