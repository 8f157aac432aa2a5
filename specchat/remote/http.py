"""Bounded HTTP for remote engines over httpx: JSON and server-sent events, every call with
timeouts and made once; failures are one-line :class:`RemoteError`s whose server text went
through :meth:`Endpoint.shown`. Design notes: docs/design/remote.md"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import ssl
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx

from specchat import untrusted
from specchat.errors import SpecchatError
from specchat.redact import redact, redact_url
from specchat.sanitize import clean_line

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # the longest silence between two chunks (a long prompt's prefill)
MAX_LINE = 1 << 20  # one SSE line; a bigger one is a broken or hostile server
MAX_BODY = 8 << 20  # a JSON answer or a /metrics text
MAX_ERROR_BODY = 4096  # what is read of an error answer
MAX_SHOWN = 200  # characters of a server's own words in an error line
PROXY_HINT = "check HTTP_PROXY / HTTPS_PROXY / ALL_PROXY, or name the server in NO_PROXY"


class RemoteError(SpecchatError):
    """The server could not be reached, answered an error, or broke the protocol.
    ``status``: the HTTP status of an error answer, None for the rest."""

    status: int | None = None


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
        # a URL password (or a token written as the user name) is a secret like the key;
        # it is never sent (httpx would send it as Basic auth, in place of the bearer key)
        self._secrets: list[str | None] = [parts.password or parts.username]
        self._base = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path.rstrip('/')}"
        self._address = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        self.api_key_env = api_key_env
        self.read_timeout = READ_TIMEOUT_S if read_timeout is None else read_timeout
        connect = CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        # No keep-alive: a stream's socket is known from its connect on, so cancel can shut it
        # (docs/design/remote.md, "Cancelling")
        self._client = httpx.Client(timeout=httpx.Timeout(self.read_timeout, connect=connect),
                                    limits=httpx.Limits(max_keepalive_connections=0),
                                    mounts=_loopback_direct(parts.hostname))
        self._sockets: set[socket.socket] = set()  # of the streams open now, for abort()
        self._lock = threading.Lock()

    def abort(self) -> None:
        """Shut the sockets of the streams open now, from any thread, so a blocked reader wakes
        at once (docs/design/remote.md, "Cancelling")."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def _headers(self) -> dict[str, str]:
        # identity: what is counted against MAX_BODY is what is held, never a body that
        # inflates a thousandfold when decompressed
        headers = {"Accept": "application/json, text/event-stream", "Accept-Encoding": "identity"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise RemoteError(f"environment variable {self.api_key_env} (target.api_key_env) is not set",
                                  key="target.api_key_env", hint=f"export {self.api_key_env}=… with the server's key")
            problem = header_problem(key)
            if problem:  # httpx would raise UnicodeEncodeError (or h11 an illegal header) mid-request
                raise RemoteError(f"environment variable {self.api_key_env} (target.api_key_env) holds characters "
                                  f"an HTTP header cannot carry ({problem})", key="target.api_key_env",
                                  hint=f"export {self.api_key_env} again with the key as issued (plain ASCII; a "
                                       "pasted key may have gained a typographic dash or quote)")
            if key not in self._secrets:
                self._secrets.append(key)
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def shown(self, text: str, limit: int = MAX_SHOWN) -> str:
        """Server text as it may appear in an error line: every secret this endpoint
        holds redacted (before it is cut, so no part of one is left), then cleaned."""
        return clean_line(redact(text, self._secrets))[:limit]

    @contextmanager
    def _open(self, method: str, path: str, body: Any | None = None,
              on_connect: Callable[[socket.socket], None] | None = None) -> Iterator[httpx.Response]:
        """The response to one request, its status checked, its body not read yet.
        ``on_connect`` gets the connection's socket as soon as it is connected."""
        where = f"{self.url}{path}"
        dialling: list[tuple[str, int]] = []  # a TCP connect begun and not completed

        def trace(event: str, info: dict[str, Any]) -> None:  # httpcore's trace extension
            if event == "connection.connect_tcp.started":
                dialling.append((info["host"], info["port"]))
            elif event == "connection.connect_tcp.complete":
                dialling.clear()
                sock = info["return_value"].get_extra_info("socket")
                if on_connect is not None and sock is not None:
                    on_connect(sock)

        request = self._client.build_request(method, self._base + path, json=body, headers=self._headers(),
                                             extensions={"trace": trace})
        try:
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException:
            raise RemoteError(f"no answer from {where} within the timeout", hint="is the server busy or stuck?") from None
        except httpx.ProxyError as exc:
            raise RemoteError(f"cannot reach the server at {self.url} through the proxy: {self.shown(str(exc))}",
                              hint=PROXY_HINT) from None
        except httpx.NetworkError as exc:  # refused, unknown host, reset, TLS
            if dialling and dialling[-1] != self._address:  # the proxy the environment names
                host, port = dialling[-1]
                raise RemoteError(f"cannot reach the proxy at {host}:{port} (for {self.url}): "
                                  f"{self.shown(_reason(exc))}", hint=PROXY_HINT) from None
            reason = _reason(exc)
            hint = ("check [target] url (http or https?) and the server's certificate" if reason.startswith("TLS")
                    else "is it running? check [target] url")
            raise RemoteError(f"cannot reach the server at {self.url}: {self.shown(reason)}", hint=hint) from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"{where} broke the HTTP protocol: {type(exc).__name__}") from None
        try:
            if response.status_code >= 400:
                text = self._read(response, MAX_ERROR_BODY, where, cut=True)
                error = RemoteError(f"{where} answered HTTP {response.status_code}: {self.shown(_error_text(text))}")
                error.status = response.status_code
                raise error
            encoding = response.headers.get("Content-Encoding", "identity").lower()
            if encoding not in ("identity", ""):
                raise RemoteError(f"{where}: the answer is compressed ({self.shown(encoding, 40)}), "
                                  "though specchat asked for it plain")
            yield response
        finally:
            response.close()

    def _read(self, response: httpx.Response, limit: int, where: str, cut: bool = False) -> str:
        """The body as text, read up to ``limit`` bytes: cut there, or refused beyond it."""
        data = bytearray()
        try:
            for chunk in response.iter_raw():
                data += chunk
                if len(data) > limit:
                    if cut:
                        break
                    raise RemoteError(f"{where}: the answer is over {limit >> 20} MiB")
        except httpx.HTTPError as exc:
            if not cut:  # an error answer's status says enough without its whole body
                raise RemoteError(f"{where}: the answer broke off ({type(exc).__name__})") from None
        return data[:limit].decode("utf-8", "replace")

    def get_text(self, path: str) -> str:
        with self._open("GET", path) as response:
            return self._read(response, MAX_BODY, f"{self.url}{path}")

    def get_json(self, path: str) -> Any:
        return self._parse(self.get_text(path), f"{self.url}{path}")

    def post_json(self, path: str, body: Any) -> Any:
        with self._open("POST", path, body) as response:
            text = self._read(response, MAX_BODY, f"{self.url}{path}")
        return self._parse(text, f"{self.url}{path}")

    def stream(self, path: str, body: Any, cancelled=lambda: False) -> Iterator[dict[str, Any]]:
        """The JSON objects of an SSE stream's ``data:`` lines until ``[DONE]`` or the end.
        A stream that breaks off raises RemoteError("… dropped …"); a line that is not
        JSON raises RemoteError("malformed chunk …"). Once ``cancelled()`` is true the
        stream just ends, however :meth:`abort` broke it off."""
        where = f"{self.url}{path}"
        mine: list[socket.socket] = []

        def connected(sock: socket.socket) -> None:
            with self._lock:
                self._sockets.add(sock)
                mine.append(sock)
            if cancelled():  # cancel came between the request and its connect
                _shut(sock)

        try:
            with self._open("POST", path, body, on_connect=connected) as response:
                for raw in self._lines(response, where):
                    if cancelled():
                        return
                    line = raw.decode("utf-8", "replace").rstrip("\r")
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
        except RemoteError:
            if cancelled():  # abort() shut the socket under the request or the read
                return
            raise
        finally:
            with self._lock:
                self._sockets.difference_update(mine)

    def _lines(self, response: httpx.Response, where: str) -> Iterator[bytes]:
        """The body's lines (without "\\n") as they arrive, none longer than MAX_LINE
        (httpx's own iter_lines() would buffer an endless line whole)."""
        pending = b""
        chunks = response.iter_raw()
        while True:
            try:
                chunk = next(chunks, None)
            except httpx.ReadTimeout:
                raise RemoteError(f"{where}: no data for {self.read_timeout:g} s, stream abandoned") from None
            except httpx.HTTPError as exc:
                raise RemoteError(f"{where}: the stream dropped mid-reply ({type(exc).__name__})") from None
            if chunk is None:
                if pending:
                    yield pending
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines + [pending]:
                if len(line) > MAX_LINE:
                    raise RemoteError(f"{where}: malformed chunk (a line over {MAX_LINE} bytes)")
            yield from lines

    def _parse(self, text: str, where: str, what: str = "answer is not JSON") -> Any:
        try:
            return untrusted.json_value(text, finite=True)
        except untrusted.Unreadable:
            raise RemoteError(f"{where}: {what}: {self.shown(text[:4096], 80)!r}") from None


def header_problem(key: str) -> str | None:
    """Why ``key`` cannot be sent as ``Authorization: Bearer KEY`` (None when it can):
    a header carries printable ASCII only, without a space at either end. Says where
    the first bad character is and what it is — never any of the key's good ones."""
    for i, char in enumerate(key):
        if not " " <= char <= "~":
            return f"character {i + 1} of {len(key)} is U+{ord(char):04X} {unicodedata.name(char, 'a control character')}"
    if key != key.strip():
        return "it begins or ends with a space"
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback: localhost, 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def _loopback_direct(host: str) -> dict[str, None]:
    """httpx mounts that reach ``host`` without a proxy when it is this machine's loopback
    (why: docs/design/remote.md, "HTTP")."""
    if not is_loopback(host):
        return {}
    return {f"all://[{host}]" if ":" in host else f"all://{host}": None}


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words: the innermost OS or TLS error's own
    ("Connection refused", "TLS: certificate verify failed: …"), else the error's type."""
    reason = type(exc).__name__
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"TLS: certificate verify failed: {seen.verify_message}"
        if isinstance(seen, ssl.SSLError):
            return f"TLS: {(seen.reason or type(seen).__name__).replace('_', ' ').lower()}"
        if isinstance(seen, OSError) and seen.strerror:
            reason = seen.strerror
        seen = seen.__cause__ or seen.__context__
    return reason


def _error_text(text: str) -> str:
    """The message inside a JSON error body ({"error": {"message": …}}), else the text."""
    try:
        data = untrusted.json_value(text)
    except untrusted.Unreadable:
        return text.strip() or "(empty body)"
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
