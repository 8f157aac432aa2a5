"""``specchat serve``: an OpenAI-compatible HTTP endpoint over the batched engine. Loopback by
default; any other address needs an API key (``--api-key-env``), which every path but /health
then asks for. Key, host, port and --parallel are checked before the model loads where they can be."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from specchat.commands.interrupt import signals_cancel
from specchat.config import load_profile
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

DEFAULT_KEY_ENV = "SPECCHAT_API_KEY"
SHARED = ("profile",)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve", help="serve a llama.cpp profile over an OpenAI-compatible HTTP API (several chats batched)",
        description="Serve a llama.cpp (GGUF) profile on an OpenAI-compatible HTTP endpoint: /v1/chat/completions, "
                    "/v1/completions, /v1/models, /health and /metrics (vLLM's spec-decode counters).")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a key)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--parallel", type=int, default=4, metavar="N",
                        help="chats decoded together (default 4); each gets 1/N of the target's context")
    parser.add_argument("--api-key-env", default=DEFAULT_KEY_ENV, metavar="VAR",
                        help=f"environment variable holding the API key (default {DEFAULT_KEY_ENV})")
    return parser


def api_key(host: str, env: str) -> str | None:
    """The key from ``env`` (None when unset and the host is loopback); a one-line
    SpecchatError for a non-loopback host without one."""
    from specchat.remote.http import header_problem, is_loopback

    key = os.environ.get(env) or None
    if key is None and not is_loopback(host):
        raise SpecchatError(f"--host {host} is not a loopback address and ${env} holds no API key",
                            key="--host", hint=f"set {env} (clients then send 'Authorization: Bearer KEY'), "
                                               "or serve on 127.0.0.1")
    if key is not None:
        problem = header_problem(key)
        if problem:  # no client could send it: every request would be refused
            raise SpecchatError(f"${env} holds characters an HTTP header cannot carry ({problem})",
                                key="--api-key-env", hint=f"set {env} to a key of plain ASCII")
    return key


def check_address(host: str, port: int) -> None:
    """--host and --port as a socket will take them (a name resolved), before anything loads."""
    if not 0 <= port <= 65535:
        raise SpecchatError(f"--port {port} is not valid", key="--port", hint="use 0..65535")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as error:  # unknown name, a NUL, a label IDNA refuses
        reason = getattr(error, "strerror", None) or type(error).__name__
        hint = ("write an IPv6 address without brackets (--host ::1)" if host.startswith("[")
                else "use an IP address of this machine, localhost, or 0.0.0.0 (with a key)")
        raise SpecchatError(f"--host {host!r} is not an address to listen on ({reason})", key="--host",
                            hint=hint) from None


def known_n_ctx(profile: Any) -> int | None:
    """The target's context in tokens, if it can be known without loading (or
    downloading) the model: the profile's n_ctx, else a local GGUF's trained one."""
    spec = profile.target
    if spec.n_ctx:
        return int(spec.n_ctx)
    from specchat.loading import embedded

    path = embedded.find_gguf() if embedded.is_embedded(spec.source) else Path(spec.source).expanduser()
    if path is None or not path.is_file():
        return None
    import llama_cpp

    from specchat.engine.backends.llamacpp import MAX_CTX, quiet_logs, trained_context

    quiet_logs(llama_cpp)  # reading the trained context logs the vocabulary to stderr
    try:
        trained = trained_context(llama_cpp, path)
    except ValueError:  # not a model llama.cpp can read: loading will say so
        return None
    return min(trained or MAX_CTX, MAX_CTX)


def run(args: argparse.Namespace) -> int:
    key = api_key(args.host, args.api_key_env)  # refused before anything loads
    check_address(args.host, args.port)
    profile = load_profile(args.profile)
    from specchat.commands.run import _progress_to_stderr
    from specchat.engine.backends.llamacpp_batch import BatchContextError
    from specchat.loading import load_models
    from specchat.serve.http import make_server
    from specchat.serve.service import build_service, check_parallel, check_profile, too_many

    check_profile(profile, args.parallel)  # before anything loads
    check_parallel(args.parallel, known_n_ctx(profile))
    loaded = load_models(profile, progress=_progress_to_stderr)
    try:
        service = build_service(profile, loaded, args.parallel, key)
    except BatchContextError:  # its KV cache did not fit: only llama.cpp could tell
        raise too_many(args.parallel, loaded.target.max_length, "llama.cpp could not open a batched context "
                       "that large (its KV cache does not fit)") from None
    try:
        server = make_server(service, args.host, args.port)
    except OSError as error:
        service.close()
        raise SpecchatError(f"cannot listen on {args.host}:{args.port} ({error.strerror or error})",
                            key="--port") from None
    host, port = server.server_address[:2]
    try:  # from here on, Ctrl-C, SIGTERM or SIGHUP stop the server cleanly (a second one at once)
        print(clean_line(f"specchat serve: {profile.name} on http://{host}:{port}/v1 — {args.parallel} chats at once, "
                         f"{service.room} tokens each{'; key required' if key else ''} (Ctrl-C stops)"),
              file=sys.stderr, flush=True)
        with signals_cancel(_stop):  # also where a parent started us with SIGINT ignored (a background job)
            server.serve_forever()
    except (KeyboardInterrupt, _Stopped):
        print("specchat serve: stopped", file=sys.stderr)
    finally:
        server.server_close()
        service.close()
    return 0


class _Stopped(Exception):
    """A signal asked the server to stop (raised in the main thread, out of serve_forever)."""


def _stop() -> None:
    raise _Stopped
