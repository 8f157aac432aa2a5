"""Remote engines: specchat as the speculation console of a server that speculates itself.

llama.cpp's ``llama-server`` (one machine, or many through its RPC backend) and vLLM
do their own speculative decoding; a remote backend streams a reply from one and turns
what the server reports into the same chat-level events a local ``ChatSession`` yields
(UserMessage, TurnStarted, StepEvent…, TurnFinished), so the TUI, the recorder, replay,
export and ``specchat run`` work unchanged. HTTP goes through httpx (:mod:`.http`); no torch.
"""

from __future__ import annotations

from specchat.remote.connect import open_chat
from specchat.remote.servers import is_remote, is_server_session, server_fields, support_line

__all__ = ["is_remote", "is_server_session", "open_chat", "server_fields", "support_line"]
