"""The llama-server peer rows under concurrency: ``llama-server -np N`` serving N
closed-loop clients, one server alive at a time. Design notes: docs/design/bench.md"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specchat.bench.peer_llama_server import (ServerProcess, Streamed, completion_body, ngram_args, start_server,
                                              stream_completion)
from specchat.bench.row import BenchRow
from specchat.remote.bench import closed_loop


class ConcurrentServerPeer:
    """llama-server with -np N slots, plain or with its own n-gram speculation."""

    def __init__(self, loaded: Any, profile: Any, stops: set[int]) -> None:
        target = loaded.target
        self.model_path, self.threads, self.n_ctx = target.model_path, target.n_threads, target.max_length
        self.n_gpu_layers = target.n_gpu_layers
        spec = profile.speculation
        self.size_m = spec.max_speculative_tokens
        self.size_n = min(spec.prompt_lookup_max, self.size_m)
        self.stops = set(stops)
        self._key: tuple[str, int] | None = None
        self._server: ServerProcess | None = None

    def server_args(self, method: str, n: int) -> list[str]:
        """llama-server's arguments for ``method`` with ``n`` slots (without host and port)."""
        spec = [] if method == "none" else ngram_args("ngram-simple", self.size_n, self.size_m)
        return ["-m", str(self.model_path), *spec, "-t", str(self.threads), "-np", str(n),
                "-c", str(n * self.n_ctx), "--no-kv-unified", "-ngl", str(self.n_gpu_layers)]

    def _serving(self, method: str, n: int) -> ServerProcess:
        if method not in ("none", "ngram") or n < 1:  # llama-server's counterparts of our batched methods
            raise ValueError(f"method {method!r} with {n} slots: need 'none' or 'ngram' and n ≥ 1")
        if self._key != (method, n):
            self.close()
            self._server = start_server(self.server_args(method, n), f"-m {self.model_path} -np {n}"
                                        + (" --spec-type ngram-simple" if method == "ngram" else ""))
            self._key = (method, n)
        return self._server

    def run(self, method: str, requests: list[Any], params_for: Callable[[Any], Any],
            n: int) -> tuple[list[BenchRow], float]:
        """method "none" (plain) or "ngram" (llama-server's own n-gram speculation); n
        client threads take the requests in order, closed loop. Returns (rows in request
        order (Streamed.row), wall_ms of the whole run from the first send to the last token)."""
        server = self._serving(method, n)
        got: list[Streamed | None] = [None] * len(requests)

        def work(_: Any, i: int, request: Any) -> None:
            # a slot reuses the cells of a prompt prefix it holds (the chat template's
            # start), as our batched engine does within a run
            body = {**completion_body(request, params_for(request), request.max_new_tokens), "cache_prompt": True}
            got[i] = stream_completion(server, body, self.stops)

        closed_loop(requests, [None] * n, work)
        if not requests:
            return [], 0.0
        first = min(s.sent for s in got)
        rows = [s.row(first) for s in got]
        return rows, max(r.start_ms + r.wall_ms for r in rows)

    def close(self) -> None:
        """Stops the server it started, if one is alive."""
        if self._server is not None:
            self._server.stop()
        self._server, self._key = None, None
