"""Opens a chat with the server a remote profile names."""

from __future__ import annotations


def open_chat(profile, progress=None):
    """(chat backend, info dict for the recording header) for a remote profile.
    Raises SpecchatError (one line) when the server cannot be reached or used."""
    if profile.target.backend == "vllm":
        from specchat.remote.vllm import VllmChat as cls
    else:
        from specchat.remote.llama_server import LlamaServerChat as cls
    chat = cls.connect(profile, progress)
    return chat, chat.info
