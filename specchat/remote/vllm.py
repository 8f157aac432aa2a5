"""A chat with vLLM's OpenAI-compatible server: a streamed chunk of n tokens is one step of
n − 1 accepted drafts and a bonus or resampled token. Design notes: docs/design/remote.md"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from specchat.events import Step, StepStats, Token
from specchat.remote.session import RemoteChat
from specchat.remote.http import Endpoint, RemoteError
from specchat.remote.llama_server_steps import MalformedChunk

FINISH = {"stop": "eos", "length": "length", "abort": "cancelled"}


def chunk_tokens(chunk: dict[str, Any]) -> tuple[list[tuple[str, float | None]], str | None]:
    """(tokens as (text, p), finish_reason) of one streamed chat-completion chunk.
    The delta's text goes to the tokens whose logprob entries spell it, else to the last."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        raise MalformedChunk("'choices' is not a list")
    if not choices:
        return [], None  # the usage chunk
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedChunk("a choice is not an object")
    delta = choice.get("delta") or {}
    text = delta.get("content") or "" if isinstance(delta, dict) else ""
    if not isinstance(text, str):
        raise MalformedChunk("'delta.content' is not text")
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        raise MalformedChunk("'logprobs' is not an object")
    entries = logprobs.get("content") or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise MalformedChunk("'logprobs.content' is not a list of tokens")
    tokens: list[tuple[str, float | None]] = []
    for entry in entries:
        lp = entry.get("logprob")
        p = math.exp(lp) if isinstance(lp, (int, float)) and -1e30 < lp <= 0 else None
        tokens.append((str(entry.get("token", "")), p))
    if not tokens and text:
        tokens = [("", None)]  # text without logprobs: one token, as far as can be told
    if tokens and "".join(t for t, _ in tokens) != text:
        tokens = [("", p) for _, p in tokens[:-1]] + [(text, tokens[-1][1])]
    finish = choice.get("finish_reason")
    return tokens, finish if isinstance(finish, str) else None


def chunk_step(tokens: list[tuple[str, float | None]], gamma: int, ms: float) -> Step:
    """One engine step from a chunk's tokens (see the module docstring for what is inferred)."""
    n = len(tokens)
    if gamma <= 0:
        kinds = ["target"] * n
        drafts = accepted = 0
    else:
        accepted = min(n - 1, gamma)
        drafts = gamma
        kinds = ["accepted"] * accepted + ["bonus" if accepted == gamma else "resampled"]
        kinds += ["resampled"] * (n - len(kinds))  # more tokens than γ + 1: not one step; shown as such
    out = tuple(Token(id=-1, kind=k, p=p, q=1.0 if k == "accepted" else None, text=t)
                for (t, p), k in zip(tokens, kinds))
    stats = StepStats(num_speculative_tokens=gamma, num_draft_tokens=drafts, num_accepted_tokens=accepted,
                      verify_ms=ms, total_ms=ms)
    return Step(out, stats)


class VllmChat(RemoteChat):
    backend = "vllm"
    label = "vLLM"

    @staticmethod
    def describe(endpoint: Endpoint, profile) -> dict[str, Any]:
        """The served model (the profile's ``source``, else the server's first) and the γ the
        profile says the server speculates with."""
        models = endpoint.get_json("/v1/models")
        data = models.get("data") if isinstance(models, dict) else None
        ids = [m.get("id") for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if not ids:
            raise RemoteError(f"{endpoint.url}/v1/models lists no model — is this a vLLM server?")
        name = profile.target.source or ids[0]
        if name not in ids:
            raise RemoteError(f"{endpoint.url} does not serve {name!r}", key="target.source",
                              hint="it serves: " + endpoint.shown(", ".join(ids[:5])))
        spec = profile.speculation
        gamma = 0 if spec.method == "none" else int(spec.num_speculative_tokens if spec.num_speculative_tokens != "auto"
                                                     else spec.max_speculative_tokens)
        return {"backend": "vllm", "url": endpoint.url, "target": endpoint.shown(name), "model_id": name,
                "server_num_speculative_tokens": gamma,
                "server_speculates": bool(gamma), "server_speculative": {"type": spec.method},
                "speculation_source": ("chunk sizes: accepted known, resampled/bonus and drafts inferred from γ"
                                       if gamma else "no speculation declared in the profile")}

    def __init__(self, endpoint: Endpoint, profile, info: dict[str, Any]) -> None:
        self.model_id = info.pop("model_id")  # as the server spells it: sent back, never shown or recorded
        super().__init__(endpoint, profile, info)

    def request(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        s = self.profile.sampling
        body = {"model": self.model_id, "messages": messages, "stream": True, "logprobs": True,
                "max_tokens": self.max_new_tokens, "temperature": self.temperature, "top_p": s.top_p,
                "stream_options": {"include_usage": True}}
        if s.top_k:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        return body

    def stream_steps(self, messages: list[dict[str, str]]) -> Iterator[Step]:
        import time

        gamma = int(self.info.get("server_num_speculative_tokens") or 0)
        finish = None
        last = time.perf_counter()
        for chunk in self.endpoint.stream("/v1/chat/completions", self.request(messages), self._cancel.is_set):
            try:
                tokens, reason = chunk_tokens(chunk)
            except MalformedChunk as exc:
                raise RemoteError(f"{self.endpoint.url}/v1/chat/completions: malformed chunk ({exc})") from None
            finish = reason or finish
            if tokens:
                now = time.perf_counter()
                step = chunk_step(tokens, gamma, (now - last) * 1000.0)
                last = now
                if reason:
                    step = Step(step.tokens, step.stats, FINISH.get(reason, "stop"))
                yield step
        if finish is None and not self._cancel.is_set():
            raise RemoteError(f"{self.endpoint.url}/v1/chat/completions: the stream ended without a finish_reason")
        self.finish_reason = FINISH.get(finish or "", "stop")
