"""OpenAI's request and response shapes: a request body → a Job; a reply → chunks/JSON.
The fields read, and what is refused: docs/design/serve.md"""

from __future__ import annotations

import dataclasses
import numbers
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from specchat.engine.sampling import SamplingParams
from specchat.errors import SamplingError

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP = 16  # stop strings a request may give (OpenAI allows 4, vLLM any number)
MAX_STOP_CHARS = 512
_SURROGATE = re.compile("[\ud800-\udfff]")  # what UTF-8 cannot encode


class BadRequest(Exception):
    """A request the server refuses: its HTTP status and one line for the client."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Job:
    """A parsed request: ``messages`` for chat, else ``prompt`` text."""

    kind: str  # "chat" or "completion"
    params: SamplingParams
    max_tokens: int
    stream: bool
    include_usage: bool
    logprobs: bool
    return_token_ids: bool = False
    stop: tuple[str, ...] = ()
    messages: tuple[dict[str, str], ...] = ()
    prompt: str = ""


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error"}
    return {"error": {"message": message, "type": kind.get(status, "invalid_request_error" if status < 500
                                                           else "server_error"), "code": status}}


def parse_job(kind: str, body: Any, defaults: SamplingParams, max_new_tokens: int) -> Job:
    """BadRequest (400) naming the field for anything malformed or out of range."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    bad = _unencodable(body)
    if bad is not None:
        raise BadRequest(f"{bad} holds a lone surrogate (as \"\\ud800\"), which is not text: "
                         "send valid Unicode (UTF-8)")
    if body.get("n", 1) != 1:
        raise BadRequest("'n' must be 1: one reply per request")
    stop = _stop(body.get("stop"))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = max_new_tokens if max_tokens is None else max_tokens
    if not _integer(max_tokens) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be an integer ≥ 1")
    top_k = body.get("top_k", defaults.top_k)
    top_k = 0 if top_k == -1 else top_k
    try:
        params = dataclasses.replace(defaults, temperature=_field(body, "temperature", defaults.temperature),
                                     top_p=_field(body, "top_p", defaults.top_p), top_k=top_k,
                                     seed=body.get("seed", defaults.seed))
    except SamplingError as error:
        raise BadRequest(f"'{error.key.removeprefix('sampling.')}': {error.message} ({error.hint})") from None
    options = body.get("stream_options")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object")
    for flag in ("stream", "logprobs", "return_token_ids"):
        if not isinstance(body.get(flag, False), bool):
            raise BadRequest(f"'{flag}' must be true or false")
    common = dict(kind=kind, params=params, max_tokens=max_tokens, stream=body.get("stream", False),
                  include_usage=options.get("include_usage") is True, logprobs=body.get("logprobs", False) is True,
                  return_token_ids=body.get("return_token_ids", False) is True, stop=stop)
    if kind == "chat":
        return Job(messages=_messages(body.get("messages")), **common)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("'prompt' must be a non-empty string")
    return Job(prompt=prompt, **common)


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None or stop == "":
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or len(stops) > MAX_STOP
            or not all(isinstance(x, str) and 0 < len(x) <= MAX_STOP_CHARS for x in stops)):
        raise BadRequest(f"'stop' must be a string or a list of at most {MAX_STOP} non-empty strings "
                         f"of at most {MAX_STOP_CHARS} characters")
    return tuple(dict.fromkeys(stops))


def _integer(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _field(body: dict, key: str, default: Any) -> Any:
    value = body.get(key)
    if _integer(value) and abs(value) > 2**63:  # JSON's integers have no bound; a float's range does
        raise BadRequest(f"'{key}' is out of range")
    return default if value is None else value


def _unencodable(body: Any) -> str | None:
    """Where a string UTF-8 cannot encode is (a key or a value; "'prompt'",
    "'messages[0].content'"), None when every one can. Iterative: a body nests as deep
    as json.loads allowed."""
    pending: list[tuple[str, Any]] = [("", body)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return f"a key in '{where[:80] or 'the body'}'"
                pending.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            pending += [(f"{where}[{i}]", item) for i, item in enumerate(value)]
        elif isinstance(value, str) and _SURROGATE.search(value):
            return f"'{where[:80]}'"
    return None


def _messages(messages: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}] must be an object with a 'role' of {', '.join(ROLES)}")
        content = m.get("content")
        if isinstance(content, list):  # content parts: the text ones, joined
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise BadRequest(f"messages[{i}].content: only text parts are supported")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be text")
        out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": content})
    return tuple(out)


class Shape:
    """The response's envelope (id, created, model) and its chunk/body builders."""

    def __init__(self, job: Job, model: str) -> None:
        self.job, self.model = job, model
        self.id = ("chatcmpl-" if job.kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.first = True

    def _envelope(self, obj: str, choices: list, **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices, **extra}

    def _choice(self, text: str, entries: list[dict], finish: str | None, message: str) -> dict[str, Any]:
        """A choice as OpenAI shapes it: chat's ``message`` (a stream's ``delta``), else text."""
        if self.job.kind != "chat":
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        said = {"role": "assistant", "content": text} if message == "message" or self.first else {"content": text}
        return {"index": 0, message: said, "logprobs": {"content": entries} if self.job.logprobs else None,
                "finish_reason": finish}

    def chunk(self, text: str, entries: list[dict], ids: list[int], finish: str | None = None,
              stats: dict | None = None) -> dict:
        choice = self._choice(text, entries, finish, "delta")
        if self.job.return_token_ids:
            choice["token_ids"] = ids
        if finish is not None:
            choice["speculative_decoding_stats"] = stats
        self.first = False
        return self._envelope("chat.completion.chunk" if self.job.kind == "chat" else "text_completion", [choice])

    def usage_chunk(self, usage: dict) -> dict:
        return self._envelope("chat.completion.chunk" if self.job.kind == "chat" else "text_completion", [],
                              usage=usage)

    def body(self, text: str, entries: list[dict], ids: list[int], finish: str, stats: dict | None, usage: dict,
             prompt_ids: list[int]) -> dict:
        choice = {**self._choice(text, entries, finish, "message"), "speculative_decoding_stats": stats}
        obj = "chat.completion" if self.job.kind == "chat" else "text_completion"
        if not self.job.return_token_ids:
            return self._envelope(obj, [choice], usage=usage)
        choice["token_ids"] = ids
        return self._envelope(obj, [choice], usage=usage, prompt_token_ids=prompt_ids)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
