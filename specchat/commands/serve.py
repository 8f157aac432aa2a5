"""``specchat serve``: one process, several chats — an OpenAI-compatible HTTP endpoint on
loopback over the batched engine (engine/batched.py), so other clients get exact
speculation and its figures (serve/).

Binds 127.0.0.1 by default. Any other address needs an API key, read from the variable
``--api-key-env`` names (default SPECCHAT_API_KEY); without one it refuses to start (one
line, exit 2). With a key set, every path but /health asks for it.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

DEFAULT_KEY_ENV = "SPECCHAT_API_KEY"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve",
        help="serve a llama.cpp profile over an OpenAI-compatible HTTP API (several chats batched)",
        description="Serve a llama.cpp (GGUF) profile on an OpenAI-compatible HTTP endpoint: /v1/chat/completions, "
                    "/v1/completions, /v1/models, /health and /metrics (vLLM's spec-decode counters).",
    )
    parser.add_argument("-p", "--profile", default="default", metavar="NAME|PATH", help="profile (default: default)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a key)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--parallel", type=int, default=4, metavar="N",
                        help="chats decoded together (default 4); each gets 1/N of the target's context")
    parser.add_argument("--api-key-env", default=DEFAULT_KEY_ENV, metavar="VAR",
                        help=f"environment variable holding the API key (default {DEFAULT_KEY_ENV})")
    return parser


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def api_key(host: str, env: str) -> str | None:
    """The key from ``env`` (None when unset and the host is loopback); a one-line
    SpecchatError for a non-loopback host without one."""
    from specchat.errors import SpecchatError

    key = os.environ.get(env) or None
    if key is None and not is_loopback(host):
        raise SpecchatError(f"--host {host} is not a loopback address and ${env} holds no API key",
                            key="--host", hint=f"set {env} (clients then send 'Authorization: Bearer KEY'), "
                                               "or serve on 127.0.0.1")
    return key


def run(args: argparse.Namespace) -> int:
    from specchat.config import load_profile
    from specchat.errors import SpecchatError
    from specchat.sanitize import clean_line

    key = api_key(args.host, args.api_key_env)  # refused before anything loads
    if not 0 <= args.port <= 65535:
        raise SpecchatError(f"--port {args.port} is not valid", key="--port", hint="use 0..65535")
    profile = load_profile(args.profile)
    from specchat.commands.run import _progress_to_stderr
    from specchat.loading import load_models
    from specchat.serve.http import make_server
    from specchat.serve.service import build_service, check_profile

    check_profile(profile, args.parallel)  # before anything loads
    loaded = load_models(profile, progress=_progress_to_stderr)
    service = build_service(profile, loaded, args.parallel, key)
    try:
        server = make_server(service, args.host, args.port)
    except OSError as error:
        service.close()
        raise SpecchatError(f"cannot listen on {args.host}:{args.port} ({error.strerror or error})",
                            key="--port") from None
    host, port = server.server_address[:2]
    try:  # from here on, Ctrl-C stops the server cleanly
        print(clean_line(f"specchat serve: {profile.name} on http://{host}:{port}/v1 — {args.parallel} chats at once, "
                         f"{service.room} tokens each{'; key required' if key else ''} (Ctrl-C stops)"),
              file=sys.stderr, flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        print("specchat serve: stopped", file=sys.stderr)
    finally:
        server.server_close()
        service.close()
    return 0
