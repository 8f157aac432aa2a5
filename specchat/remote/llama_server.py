"""A chat with llama.cpp's ``llama-server``, shown with the server's own speculation: the
server renders the template (``/apply-template``) and counts the prompt (``/tokenize``); the
reply streams from ``/completion`` and :mod:`llama_server_steps` turns its chunks into steps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from specchat.events import Step
from specchat.remote.session import RemoteChat
from specchat.remote.http import Endpoint, RemoteError
from specchat.remote.llama_server_steps import MalformedChunk, StepBuilder
from specchat.remote.metrics import spec_counters


class LlamaServerChat(RemoteChat):
    backend = "llama-server"
    label = "llama-server"

    @staticmethod
    def describe(endpoint: Endpoint, profile) -> dict[str, Any]:
        """What the server serves and how it speculates, for the header and the panel.
        llama-server 0.3.36 says *whether* a slot speculates (``/slots``) and with which
        types (``/props``), not its γ: the number of ``/metrics``' per-position acceptance
        counters gives it once it has drafted (``--metrics``), else γ stays unknown (0)."""
        health = endpoint.get_json("/health")
        if isinstance(health, dict) and health.get("status") not in (None, "ok"):
            raise RemoteError(f"{endpoint.url}: the server is not ready ({endpoint.shown(str(health.get('status')))})")
        info: dict[str, Any] = {"backend": "llama-server", "url": endpoint.url}
        props = endpoint.get_json("/props")
        types = ""
        if isinstance(props, dict):
            # the server's own words: shown and recorded, so redacted and cleaned here
            info["target"] = endpoint.shown(str(props.get("model_path") or props.get("model_alias") or ""))
            info["server_build"] = endpoint.shown(str(props.get("build_info") or ""))
            params = (props.get("default_generation_settings") or {}).get("params") or {}
            types = endpoint.shown(str(params.get("speculative.types") or "")) if isinstance(params, dict) else ""
        try:
            slots = endpoint.get_json("/slots")
        except RemoteError:
            slots = None  # started with --no-slots
        if isinstance(slots, list) and slots and isinstance(slots[0], dict) and "speculative" in slots[0]:
            speculating = slots[0]["speculative"] is True
        else:
            speculating = types not in ("", "none")
        info["server_speculates"] = speculating
        # /props shows the default request's types ("none" even when the slot speculates)
        info["server_speculative"] = {"type": types if types not in ("", "none") else "server"}
        info["server_num_speculative_tokens"] = per_position_count(endpoint) if speculating else 0
        info["speculation_source"] = ("server counts: accepted known, resampled/bonus inferred"
                                      if speculating else "the server reports no speculation")
        return info

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        answer = self.endpoint.post_json("/apply-template", {"messages": messages})
        self._prompt = answer.get("prompt") if isinstance(answer, dict) else None
        if not isinstance(self._prompt, str):
            raise RemoteError(f"{self.endpoint.url}/apply-template: no prompt in the answer")
        answer = self.endpoint.post_json("/tokenize", {"content": self._prompt, "add_special": True,
                                                       "parse_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        return len(tokens) if isinstance(tokens, list) else 0

    def request(self, prompt: str) -> dict[str, Any]:
        s = self.profile.sampling
        body = {"prompt": prompt, "stream": True, "n_predict": self.max_new_tokens, "temperature": self.temperature,
                "top_p": s.top_p, "top_k": s.top_k, "timings_per_token": True, "return_tokens": True,
                "cache_prompt": True}
        if s.seed is not None:
            body["seed"] = s.seed
        return body

    def stream_steps(self, messages: list[dict[str, str]]) -> Iterator[Step]:
        builder = StepBuilder(int(self.info.get("server_num_speculative_tokens") or 0), self.max_new_tokens)
        chunks = self.endpoint.stream("/completion", self.request(self._prompt), cancelled=self._cancel.is_set)
        try:
            for chunk in chunks:
                yield from builder.feed(chunk)
        except MalformedChunk as exc:
            yield from builder.finish()
            raise RemoteError(f"{self.endpoint.url}/completion: malformed chunk ({exc})") from None
        except RemoteError:
            yield from builder.finish()  # the partial reply is kept
            raise
        yield from builder.finish()
        if builder.final is None and not self._cancel.is_set():
            raise RemoteError(f"{self.endpoint.url}/completion: the stream ended without its final chunk")
        self.finish_reason = builder.finish_reason


def per_position_count(endpoint: Endpoint) -> int:
    """The server's per-position acceptance counters (= γ, at most MAX_POSITIONS), 0 if absent."""
    try:
        return len(spec_counters(endpoint.get_text("/metrics"), "llama-server")["accepted_per_position"])
    except RemoteError:  # started without --metrics, or counters that fail validation
        return 0
