"""Bounded HTTP for remote engines: JSON requests and server-sent events (SSE).

Standard library only (``http.client``). Every call has a connect and a read timeout
and is made once — no retry loop; the next user message simply makes a new request.
Failures raise :class:`RemoteError`, whose ``str()`` is one line for the UI and CLI.
What a server sends can quote the key it was sent (an error body often does), so all
server text in an error passes through :meth:`Endpoint.shown` here, where the key is
known: redacted, then cleaned (:mod:`specchat.sanitize`). The URL is kept and shown
without its user info.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from specchat.errors import SpecchatError
from specchat.redact import redact, redact_url
from specchat.sanitize import clean_line

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # the longest silence between two chunks (a long prompt's prefill)
MAX_LINE = 1 << 20  # one SSE line; a bigger one is a broken or hostile server
MAX_SHOWN = 200  # characters of a server's own words in an error line


class RemoteError(SpecchatError):
    """The server could not be reached, answered an error, or broke the protocol."""


class Endpoint:
    """A server's base URL and optional bearer key (read from an environment variable
    named in the profile; the key itself is never stored or recorded). ``url`` is the
    URL as shown: without its user info, which is kept only to redact."""

    def __init__(self, url: str, api_key_env: str | None = None, *, connect_timeout: float | None = None,
                 read_timeout: float | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"url {url!r} is not an http(s) URL", key="target.url",
                              hint='write it as "http://HOST:PORT"')
        self.url = redact_url(url.rstrip("/"))
        # a URL password (or a token written as the user name) is a secret like the key
        self._secrets: list[str | None] = [parts.password or parts.username]
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.api_key_env = api_key_env
        self.connect_timeout = CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        self.read_timeout = READ_TIMEOUT_S if read_timeout is None else read_timeout
        # the sockets of the streams open now, for abort() (a response that reads to the
        # end of the stream takes its socket off the connection, so it is kept here)
        self._streams: dict[http.client.HTTPConnection, socket.socket] = {}
        self._lock = threading.Lock()

    def abort(self) -> None:
        """Shut the sockets of the streams open now, from any thread: a reader blocked on
        a server that trickles or has gone silent wakes at once instead of at the next
        read timeout (up to READ_TIMEOUT_S). ``close()`` alone would not wake it."""
        with self._lock:
            sockets = list(self._streams.values())
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise RemoteError(f"environment variable {self.api_key_env} (target.api_key_env) is not set",
                                  key="target.api_key_env", hint=f"export {self.api_key_env}=… with the server's key")
            if key not in self._secrets:
                self._secrets.append(key)
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def shown(self, text: str, limit: int = MAX_SHOWN) -> str:
        """Server text as it may appear in an error line: every secret this endpoint
        holds redacted (before it is cut, so no part of one is left), then cleaned."""
        return clean_line(redact(text, self._secrets))[:limit]

    def _open(self, method: str, path: str, body: Any | None,
              abortable: bool = False) -> tuple[http.client.HTTPConnection, Any]:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.connect_timeout)
        try:
            return self._request(conn, method, path, body, abortable)
        except BaseException:
            self._forget(conn)
            raise

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._streams.pop(conn, None)

    def _request(self, conn, method: str, path: str, body: Any | None,
                 abortable: bool) -> tuple[http.client.HTTPConnection, Any]:
        where = f"{self.url}{path}"
        try:
            conn.connect()
            conn.sock.settimeout(self.read_timeout)
            if abortable:
                with self._lock:
                    self._streams[conn] = conn.sock
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, self.base_path + path, body=data, headers=self._headers())
            response = conn.getresponse()
        except RemoteError:
            conn.close()
            raise
        except socket.timeout:
            conn.close()
            raise RemoteError(f"no answer from {where} within the timeout", hint="is the server busy or stuck?") from None
        except OSError as exc:
            conn.close()
            reason = exc.strerror or type(exc).__name__
            raise RemoteError(f"cannot reach the server at {self.url}: {reason}",
                              hint="is it running? check [target] url") from None
        except http.client.HTTPException as exc:
            conn.close()
            raise RemoteError(f"{where} broke the HTTP protocol: {type(exc).__name__}") from None
        if response.status >= 400:
            text = response.read(4096).decode("utf-8", "replace")
            conn.close()
            raise RemoteError(f"{where} answered HTTP {response.status}: {self.shown(_error_text(text))}")
        return conn, response

    def get_text(self, path: str) -> str:
        conn, response = self._open("GET", path, None)
        try:
            return response.read(8 << 20).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            raise RemoteError(f"{self.url}{path}: the answer broke off ({type(exc).__name__})") from None
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        return self._parse(self.get_text(path), f"{self.url}{path}")

    def post_json(self, path: str, body: Any) -> Any:
        conn, response = self._open("POST", path, body)
        try:
            text = response.read(8 << 20).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            raise RemoteError(f"{self.url}{path}: the answer broke off ({type(exc).__name__})") from None
        finally:
            conn.close()
        return self._parse(text, f"{self.url}{path}")

    def stream(self, path: str, body: Any, cancelled=lambda: False) -> Iterator[dict[str, Any]]:
        """The JSON objects of an SSE stream's ``data:`` lines until ``[DONE]`` or the end.
        A stream that breaks off raises RemoteError("… dropped …"); a line that is not
        JSON raises RemoteError("malformed chunk …"). Once ``cancelled()`` is true the
        stream just ends, however :meth:`abort` broke it off."""
        try:
            conn, response = self._open("POST", path, body, abortable=True)
        except RemoteError:
            if cancelled():  # abort() shut the socket while it waited for the headers
                return
            raise
        where = f"{self.url}{path}"
        try:
            while not cancelled():
                try:
                    raw = response.readline(MAX_LINE + 1)
                except (OSError, http.client.HTTPException) as exc:
                    if cancelled():  # abort() shut the socket under the read
                        return
                    if isinstance(exc, socket.timeout):
                        raise RemoteError(f"{where}: no data for {self.read_timeout:g} s, stream abandoned") from None
                    raise RemoteError(f"{where}: the stream dropped mid-reply ({type(exc).__name__})") from None
                if cancelled():
                    return
                if not raw:
                    return
                if len(raw) > MAX_LINE:
                    raise RemoteError(f"{where}: malformed chunk (a line over {MAX_LINE} bytes)")
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if not line.startswith("data:"):
                    if line.startswith("error:"):
                        raise RemoteError(f"{where}: the server reported {self.shown(_error_text(line[6:]))}")
                    continue  # blank separators, comments, event: lines
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                chunk = self._parse(data, where, what="malformed chunk")
                if not isinstance(chunk, dict):
                    raise RemoteError(f"{where}: malformed chunk (not a JSON object)")
                if "error" in chunk and len(chunk) <= 2:
                    raise RemoteError(f"{where}: the server reported {self.shown(_error_text(json.dumps(chunk)))}")
                yield chunk
        finally:
            self._forget(conn)
            conn.close()

    def _parse(self, text: str, where: str, what: str = "answer is not JSON") -> Any:
        try:
            return json.loads(text, parse_constant=_not_finite, parse_float=_finite)
        except ValueError:
            raise RemoteError(f"{where}: {what}: {self.shown(text[:4096], 80)!r}") from None


def _not_finite(word: str) -> float:
    """JSON has no NaN or Infinity; Python's parser takes them, a server's answer may not."""
    raise ValueError(f"{word} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise ValueError(f"{text} is not a finite number")
    return value


def _error_text(text: str) -> str:
    """The message inside a JSON error body ({"error": {"message": …}}), else the text."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip() or "(empty body)"
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
