"""How many requests a server decodes at once, checked before a concurrent bench.

llama-server serves at most ``-np N`` requests together (its slots); a request beyond
them waits in its queue, so ``--concurrency`` above N would measure queueing, not
batching. ``GET /props`` reports N as ``total_slots``. vLLM has no ``/props`` and
batches by itself, so it is not limited here.
"""

from __future__ import annotations

from specchat.remote.http import Endpoint, RemoteError

SLOTS_HINT = "start llama-server with -np N, or lower --concurrency"


def _slots(endpoint: Endpoint) -> int | None:
    """llama-server's ``total_slots`` from ``GET /props``; None when the server has no
    /props (HTTP 404: vLLM) or does not say. A server that cannot be reached, or that
    answers another error, raises RemoteError (one line)."""
    try:
        props = endpoint.get_json("/props")
    except RemoteError as exc:
        if exc.status == 404:
            return None
        raise
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1 else None


def check_concurrency(url: str, n: int, api_key_env: str | None = None) -> None:
    """RemoteError (one line) when the server at ``url`` decodes fewer than ``n`` requests
    at once; nothing when it has enough slots or does not report them."""
    endpoint = Endpoint(url, api_key_env)
    slots = _slots(endpoint)
    if slots is not None and slots < n:
        raise RemoteError(f"the server at {endpoint.url} has {slots} parallel slots; --concurrency {n} needs {n}",
                          hint=SLOTS_HINT)
