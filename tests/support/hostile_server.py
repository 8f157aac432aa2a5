"""A scripted server on 127.0.0.1 for the remote-engine tests: it *is* the hostile peer.

It answers each path with what the test scripts — any status, any body (escapes, the
key it was sent, non-finite numbers, a stream of SSE lines) — and keeps every request
it gets (method, path, headers, body), so a test can count them and read what specchat
sent. Standard library only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Union

from tests.support import FIXTURES


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


# A reply: (status, body) where a body that is not bytes or str is sent as JSON; or a
# function of the request (and the requests so far) that returns one.
Reply = Union[tuple[int, Any], Callable[[Request, list[Request]], tuple[int, Any]]]


class HostileServer:
    def __init__(self, routes: dict[str, Reply]) -> None:
        self.routes = dict(routes)
        self.requests: list[Request] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._answer()

            def do_POST(self):
                self._answer()

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                server.requests.append(request)
                reply = server.routes.get(self.path, (404, {"error": {"message": "no such path"}}))
                status, body = reply(request, server.requests) if callable(reply) else reply
                kind = "text/event-stream" if isinstance(body, str) and body.startswith("data:") else "application/json"
                data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def sent(self) -> str:
        """Everything specchat sent, headers and bodies, as one text to search for secrets."""
        return "\n".join(f"{r.method} {r.path} {json.dumps(r.headers)} {r.body.decode('utf-8', 'replace')}"
                         for r in self.requests)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def vllm_routes(model: str = "m") -> dict[str, Reply]:
    """A well-behaved vLLM: one model, one speculating reply (the recorded fixture)."""
    return {"/v1/models": (200, {"object": "list", "data": [{"id": model, "object": "model"}]}),
            "/metrics": (200, ""),
            "/v1/chat/completions": (200, (FIXTURES / "vllm" / "chat_stream_spec.sse").read_text())}


def vllm_profile(tmp_path: Path, url: str, key_env: str | None = None, name: str = "server") -> Path:
    """A profile file for a vLLM server at ``url``, reading its key from ``key_env``."""
    path = tmp_path / f"{name}.toml"
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    path.write_text(f'[target]\nbackend = "vllm"\nurl = "{url}"\n{key}[speculation]\nnum_speculative_tokens = 3\n')
    return path


def sse(*chunks: Any) -> str:
    """An SSE body: one ``data:`` line per chunk (JSON unless already text)."""
    return "".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks)


def llama_routes(model_path: str = "model.gguf", metrics: str = "", completion: str | None = None) -> dict[str, Reply]:
    """A llama-server that speculates: ``/props`` names ``model_path``; ``/completion``
    streams ``completion`` (default: one drafted step "Hi" and a final chunk)."""
    if completion is None:
        timings = {"predicted_ms": 2.0, "prompt_ms": 1.0, "prompt_n": 3, "draft_n": 2, "draft_n_accepted": 1}
        completion = sse({"content": "Hi", "tokens": [7], "tokens_predicted": 2, "timings": timings},
                         {"content": "", "stop": True, "stop_type": "eos", "tokens_predicted": 2, "timings": timings})
    return {"/health": (200, {"status": "ok"}),
            "/props": (200, {"model_path": model_path, "build_info": "b1",
                             "default_generation_settings": {"params": {"speculative.types": "draft"}}}),
            "/slots": (200, [{"id": 0, "speculative": True}]),
            "/metrics": (200, metrics),
            "/apply-template": (200, {"prompt": "<user>hi</user>"}),
            "/tokenize": (200, {"tokens": [1, 2, 3]}),
            "/completion": (200, completion)}


def llama_profile(tmp_path: Path, url: str, key_env: str | None = None, extra: str = "") -> Path:
    path = tmp_path / "llama.toml"
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    path.write_text(f'[target]\nbackend = "llama-server"\nurl = "{url}"\n{key}{extra}')
    return path
