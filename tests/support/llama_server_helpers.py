"""A real llama-server (and rpc-server) for the remote-engine tests, on 127.0.0.1.

The binaries come from ``make llama-server`` (``$SPECCHAT_LLAMA_SERVER_DIR``, else its
cache dir); tests skip with that instruction when they are missing. A faulty proxy in
front of the real server plays the failures a network can add: a stream that drops
mid-reply, a malformed chunk, an HTTP error.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import threading
import time
from pathlib import Path
from socketserver import StreamRequestHandler, ThreadingTCPServer

# n-gram speculation that drafts on a short chat (the default sizes draft nothing there)
SPEC_ARGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "4",
             "--spec-draft-n-max", "4")
REPEAT_PROMPT = ("Copy this text exactly, twice: the quick brown fox jumps over the lazy dog, "
                 "the quick brown fox jumps over the lazy dog.")


def server_dir() -> Path | None:
    """Where ``make llama-server`` put the binaries (specchat's own lookup), when both the
    tests need are there."""
    from specchat.bench.peer_llama_server import server_bin_dir

    directory = server_bin_dir()
    return directory if directory is not None and (directory / "rpc-server").is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A process started with ``args``, waited on until ``/health`` says ok."""

    def __init__(self, binary: Path, args: list[str], log: Path, health: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen([str(binary), *args, "--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        if health:
            self._wait_healthy()

    def _wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                if get(self.url, "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not healthy after {timeout}s: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def llama_server(directory: Path, gguf: Path, log: Path, *extra: str) -> Server:
    return Server(directory / "llama-server", ["-m", str(gguf), "-t", "1", "-c", "2048", "-np", "1", "--metrics",
                                               *extra], log)


def get(url: str, path: str) -> tuple[int, str]:
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def spec_counters(url: str) -> dict[str, float]:
    """llama-server's speculation counters from ``/metrics`` (Prometheus text)."""
    status, text = get(url, "/metrics")
    assert status == 200, text
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def per_position_delta(before: dict[str, float], after: dict[str, float]) -> list[int]:
    """Accepted drafts per position over an interval (``…_per_pos_total{position="i"}``)."""
    name = 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="%d"}'
    out, i = [], 0
    while name % i in after:
        out.append(int(after[name % i] - before.get(name % i, 0)))
        i += 1
    return out


def spec_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """num_drafts / num_draft_tokens / num_accepted_tokens over an interval."""
    names = {"num_drafts": "llamacpp:spec_decode_num_drafts_total",
             "num_draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
             "num_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total"}
    return {k: int(after.get(n, 0) - before.get(n, 0)) for k, n in names.items()}


class FaultyProxy:
    """Forwards HTTP to ``upstream``; the reply of POST /completion is spoiled by ``mode``:
    ``drop`` closes the connection after ``after`` SSE data lines, ``garbage`` sends a
    non-JSON data line after them, ``stall`` goes silent for 3 s there, ``http500``
    answers 500 at once."""

    def __init__(self, upstream: str, mode: str, after: int = 5, times: int | None = None) -> None:
        proxy = self
        self.times = times  # spoil only the first ``times`` replies (None: all)

        class Handler(StreamRequestHandler):
            def handle(self):
                request_line = self.rfile.readline().decode()
                headers, length = [], 0
                while (line := self.rfile.readline().decode()) not in ("\r\n", "\n", ""):
                    headers.append(line)
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":")[1])
                body = self.rfile.read(length) if length else None
                method, path, _ = request_line.split(" ", 2)
                proxy.forward(self.wfile, method, path, body)

        self.upstream = upstream
        self.mode, self.after = mode, after
        self.server = ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, out, method: str, path: str, body: bytes | None) -> None:
        mode = self.mode
        if path == "/completion":
            if self.times is not None:
                mode = mode if self.times > 0 else "none"
                self.times -= 1
        if path == "/completion" and mode == "http500":
            msg = b'{"error": {"code": 500, "message": "model crashed\\u001b]0;pwned\\u0007", "type": "server_error"}}'
            out.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: "
                      + str(len(msg)).encode() + b"\r\nConnection: close\r\n\r\n" + msg)
            return
        host, port = self.upstream.split("//")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if path != "/completion":
            data = r.read()
            out.write(f"HTTP/1.1 {r.status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                      "Connection: close\r\n\r\n".encode() + data)
            conn.close()
            return
        out.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        sent = 0
        while line := r.readline():
            if line.startswith(b"data:"):
                if sent == self.after and mode != "none":
                    if mode == "garbage":
                        out.write(b"data: {not json\n\n")
                        out.flush()
                    if mode == "stall":
                        time.sleep(3)
                    break  # drop: the connection closes mid-reply
                sent += 1
            out.write(line)
            out.flush()
        conn.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
