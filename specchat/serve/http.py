"""The HTTP side of ``specchat serve``: stdlib ThreadingHTTPServer, one thread a client.
Nothing a client sends reaches a 5xx; log lines are cleaned. Design notes: docs/design/serve.md"""

from __future__ import annotations

import hmac
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specchat import untrusted
from specchat.errors import GenerationError, one_line
from specchat.sanitize import clean_line
from specchat.serve.openai import BadRequest, Shape, error_body, parse_job, usage
from specchat.serve.reply import Reply
from specchat.serve.service import Service

MAX_BODY = 1 << 20  # bytes: a request body larger than this is refused (413)
BODY_TIMEOUT_S = 30.0  # a body that has not all arrived by then is refused (408), its thread freed
GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)  # the client closed its connection


class Handler(BaseHTTPRequestHandler):
    service: Service  # set on the subclass make_server builds
    quiet = False
    server_version = "specchat"
    command: str | None = None  # the stdlib sets it once a request line is read
    _left = False  # the client went away (logged once)
    _streaming = False  # a 200 and its headers went out: no other status can follow

    def handle(self) -> None:
        # the stdlib reads request lines outside any handler of ours: a client that
        # resets its connection there would print socketserver's traceback
        try:
            super().handle()
        except GONE:
            self._went_away()

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def _answer(self, route) -> None:
        self.path = self.path.split("?", 1)[0]  # a scraper's ?query changes nothing here
        try:
            if self.path != "/health" and not self._authorised():
                raise BadRequest("a valid 'Authorization: Bearer KEY' header is required", 401)
            route()
        except BadRequest as error:
            self._json(error_body(str(error), error.status), error.status)
        except GONE:
            self._went_away()
        except Exception as exc:  # noqa: BLE001 — the client gets one line; the server goes on
            _log(f"specchat serve: internal error on {self.command} {self.path}: {one_line(exc)}")
            if self._streaming:  # a second status line inside the stream would corrupt it
                self.close_connection = True
                return
            self._json(error_body(f"internal error: {one_line(exc)}", 500), 500)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (a malformed request line or headers, a method no
        do_* answers) as one JSON line like every other error; an unknown method is the
        client's (405, not 501), and so is an HTTP version other than 1.x (400, not 505)."""
        status = {501: 405, 505: 400}.get(code, code)
        text = message or self.responses.get(code, ("error",))[0]
        if code == 501:
            text = f"method {self.command[:40]} is not allowed: use GET or POST"
        elif code == 505:
            text += ": use HTTP/1.1"
        self.request_version = "HTTP/1.0"  # a status line, even where the request line was too broken to say
        self.log_error("code %d, message %s", status, text)
        self.close_connection = True
        headers = {"Connection": "close", **({"Allow": "GET, POST"} if status == 405 else {})}
        self._json(error_body(clean_line(text)[:200], status), status, headers)

    def _authorised(self) -> bool:
        key = self.service.api_key
        if not key:
            return True
        sent = self.headers.get("Authorization", "")
        return hmac.compare_digest(sent.encode("utf-8", "replace"), f"Bearer {key}".encode())

    def _get(self) -> None:
        s = self.service
        if self.path == "/health":
            self._json({"status": "ok"})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": s.model, "object": "model", "owned_by": "specchat",
                                                    "max_model_len": s.room}]})
        elif self.path == "/metrics":
            self._send(s.metrics.render(s.batch.running).encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            raise BadRequest(f"no such path: GET {self.path[:200]}", 404)

    def _post(self) -> None:
        kinds = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
        if self.path not in kinds:
            raise BadRequest(f"no such path: POST {self.path[:200]}", 404)
        job = parse_job(kinds[self.path], self._body(), self.service.defaults, self.service.max_new_tokens)
        handle, prompt_ids = self.service.start(job)
        reply = Reply(self.service.chat.tokenizer, self.service.num_spec_tokens, job.stop)
        shape = Shape(job, self.service.model)
        try:
            if job.stream:
                self._stream(handle, reply, shape, len(prompt_ids))
            else:
                entries: list[dict] = []
                for step in handle.until(self._gone):
                    entries += reply.add(step)[1]
                    if self._stopped(handle, reply):
                        break
                    if self._gone():  # nothing to write to: free the slot now, not at the reply's end
                        return
                if not handle.finished and not reply.stopped:  # gone while it waited for a slot
                    return
                self._json(shape.body(reply.text, entries, reply.ids, reply.finish_reason, reply.spec_stats(),
                                      usage(len(prompt_ids), len(reply.ids)), prompt_ids))
        except GenerationError as error:
            self._json(error_body(f"generation failed: {error}", 500), 500)
        finally:
            handle.cancel()  # a no-op once finished; frees the slot of a client that went away

    def _stream(self, handle, reply: Reply, shape: Shape, prompt_tokens: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self._streaming = True
        try:
            for step in handle.until(self._gone):  # one chunk a step, as vLLM streams (--stream-interval 1)
                text, entries = reply.add(step)
                finish = reply.finish_reason
                ids = [t.id for t in step.tokens]
                self._event(shape.chunk(text, entries, ids, finish, reply.spec_stats() if finish else None))
                if self._stopped(handle, reply):
                    break
        except GenerationError as error:
            self._event(error_body(f"generation failed: {error}", 500))
        if not handle.finished and not reply.stopped:  # the client went away while it waited
            return
        if shape.job.include_usage:
            self._event(shape.usage_chunk(usage(prompt_tokens, len(reply.ids))))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _gone(self) -> bool:
        """The client closed its connection: a peek that finds the end of the stream (a
        client may send its next request early; that is data, not a close). A gone client
        gets nothing more on this connection."""
        try:
            gone = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:  # nothing to read: still there
            return False
        except OSError:  # reset
            gone = True
        if gone:
            self._went_away()
        return gone

    def _went_away(self) -> None:
        """The client closed or reset its connection: nothing more is written to it, and
        one line says so (its request, if one was running, is cancelled by the caller)."""
        self.close_connection = True
        if not self._left:
            self._left = True
            self.log_message("client went away%s", f" during {self.command} {self.path}" if self.command else "")

    def _stopped(self, handle, reply: Reply) -> bool:
        """A stop string ended the reply: its request is cancelled, its end counted as "stop"."""
        if reply.stopped and not handle.finished:
            handle.stop()
        return reply.stopped

    def _event(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")
        self.wfile.flush()

    def _body(self) -> Any:
        if self.headers.get("Transfer-Encoding"):
            raise BadRequest("send the body with a Content-Length, not chunked", 411)
        length = self.headers.get("Content-Length", "").strip()
        if not (length.isascii() and length.isdigit()):  # "²" is a digit to str.isdigit, not to int()
            raise BadRequest("a Content-Length header (the body's size in bytes) is required", 411)
        digits = length.lstrip("0") or "0"
        if len(digits) > len(str(MAX_BODY)) or int(digits) > MAX_BODY:  # int() refuses thousands of digits
            self.close_connection = True  # the body is never read
            raise BadRequest(f"the request body is {digits[:20]} bytes; at most {MAX_BODY} are accepted", 413)
        size = int(digits)
        self.connection.settimeout(BODY_TIMEOUT_S)
        try:
            data = self.rfile.read(size)
        except TimeoutError:
            self.close_connection = True
            raise BadRequest(f"the request body ({size} bytes by its Content-Length) did not arrive within "
                             f"{BODY_TIMEOUT_S:g} s", 408) from None
        finally:
            self.connection.settimeout(None)
        if len(data) < size:  # the client stopped sending: there is no rest of it to wait for
            self.close_connection = True
            raise BadRequest(f"the request body ended after {len(data)} of the {size} bytes its Content-Length says")
        try:
            return untrusted.json_value(data)
        except untrusted.Unreadable:
            raise BadRequest("the request body is not valid JSON (UTF-8)") from None

    def _json(self, obj: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._send(json.dumps(obj, ensure_ascii=False).encode(), "application/json", status, headers)

    def _send(self, data: bytes, content_type: str, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":  # a HEAD answer has no body, whatever its length says
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the stdlib's name
        if not self.quiet:
            _log(f"{self.address_string()} {format % args}")


_log_lock = threading.Lock()


def _log(line: str) -> None:
    """One cleaned line on stderr, whole: handler threads printing at once would
    otherwise interleave a line's text and its newline."""
    with _log_lock:
        sys.stderr.write(clean_line(line) + "\n")
        sys.stderr.flush()


def make_server(service: Service, host: str, port: int, quiet: bool = False) -> ThreadingHTTPServer:
    """The server bound to (host, port) — port 0 picks a free one: ``server.server_address``."""
    handler = type("ServeHandler", (Handler,), {"service": service, "quiet": quiet})
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # the listen backlog: the stdlib's 5 reset clients in a burst (4 of 20 at once); the
    # kernel's own cap instead, for a connection accepted is only a thread, and requests
    # past --parallel wait in the engine's queue, not in the kernel's
    server_class = type("ServeHTTPServer", (ThreadingHTTPServer,), {"address_family": family, "daemon_threads": True,
                                                                    "request_queue_size": socket.SOMAXCONN})
    return server_class((host, port), handler)
