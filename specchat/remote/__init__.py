"""Remote engines: a server that speculates itself (llama-server, vLLM) as a source of
steps, turned into the chat events a local ``ChatSession`` yields. No torch."""

from __future__ import annotations

from specchat.remote.connect import open_chat
from specchat.remote.servers import is_remote, is_server_session, server_fields, support_line

__all__ = ["is_remote", "is_server_session", "open_chat", "server_fields", "support_line"]
