"""How many requests a server decodes at once, checked before a concurrent bench: above
llama-server's ``-np N`` slots, ``--concurrency`` would measure queueing, not batching."""

from __future__ import annotations

from specchat.remote.http import Endpoint, RemoteError


def check_concurrency(url: str, n: int, api_key_env: str | None = None) -> None:
    """RemoteError (one line) when the server at ``url`` decodes fewer than ``n`` requests
    at once (``total_slots`` in ``GET /props``); nothing when it does not say (vLLM has no
    /props and batches by itself)."""
    endpoint = Endpoint(url, api_key_env)
    try:
        props = endpoint.get_json("/props")
    except RemoteError as exc:
        if exc.status == 404:
            return
        raise
    slots = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots < n:
        raise RemoteError(f"the server at {endpoint.url} has {slots} parallel slots; --concurrency {n} needs {n}",
                          hint="start llama-server with -np N, or lower --concurrency")
