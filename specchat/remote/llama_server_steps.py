"""llama-server's streamed chunks → engine steps with provenance. Pure; no I/O.
How provenance and times are read from the counters: docs/design/remote.md"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specchat.events import Step, StepStats, Token

STOP_TYPES = {"eos": "eos", "word": "stop", "limit": "length"}


class MalformedChunk(ValueError):
    """A server's streamed chunk (llama-server's or vLLM's) is not shaped as its protocol says."""


@dataclass
class _Open:
    drafts: int
    accepted: int
    size: int  # tokens the step will emit
    start_ms: float
    tokens: list[tuple[int, str, float | None]] = field(default_factory=list)


class StepBuilder:
    """Feed chunks in order with :meth:`feed`; it returns the steps they completed.
    :meth:`finish` returns the last one. ``num_speculative_tokens`` is the server's
    γ (``speculative.n_max``), recorded in each step's stats."""

    def __init__(self, num_speculative_tokens: int = 0, max_tokens: int = 1 << 20) -> None:
        self.gamma = num_speculative_tokens
        self.max_tokens = max_tokens  # the n_predict asked for: no server's count goes beyond it
        self.drafts = 0
        self.accepted = 0
        self.decoded = 0
        self.prev_ms = 0.0
        self.prompt_ms = 0.0
        self.prompt_tokens = 0
        self.first = True
        self.open: _Open | None = None
        self.final: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> list[Step]:
        if not isinstance(chunk, dict):
            raise MalformedChunk("a chunk is not a JSON object")
        timings = chunk.get("timings") or {}
        if not isinstance(timings, dict):
            raise MalformedChunk("'timings' is not an object")
        if chunk.get("stop"):
            self.final = chunk
            self._prompt(timings)
        if "prompt_progress" in chunk and not chunk.get("tokens"):
            return []
        decoded = chunk.get("tokens_predicted")
        ids = chunk.get("tokens") or []
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise MalformedChunk("'tokens' is not a list of ids")
        if chunk.get("stop"):
            return []  # the final chunk repeats totals, not new tokens
        if not isinstance(decoded, int) or isinstance(decoded, bool):
            raise MalformedChunk("'tokens_predicted' is missing")
        if decoded > self.max_tokens:  # and nothing is sized by it
            raise MalformedChunk(f"'tokens_predicted' {decoded} is beyond the {self.max_tokens} tokens asked for")
        count = decoded - self.decoded
        if count <= 0:
            return []
        self.decoded = decoded
        text = chunk.get("content", "")
        if not isinstance(text, str):
            raise MalformedChunk("'content' is not text")
        p = _probability(chunk)
        new = [(-1, "", None)] * (count - 1) + [(ids[-1] if ids else -1, text, p)]
        self._prompt(timings)
        drafts, accepted = _int(timings, "draft_n"), _int(timings, "draft_n_accepted")
        changed = (drafts, accepted) != (self.drafts, self.accepted)
        if changed and not 0 <= accepted - self.accepted <= drafts - self.drafts:
            # a step keeps at most the drafts it verified, and the counts only grow
            raise MalformedChunk(f"'timings.draft_n_accepted' {accepted} and 'draft_n' {drafts} do not follow "
                                 f"{self.accepted} and {self.drafts}: a step kept more drafts than it verified")
        now_ms = _ms(timings, "predicted_ms", self.prev_ms)
        done: list[Step] = []
        for i, token in enumerate(new):
            if i == 0 and (drafts, accepted) != (self.drafts, self.accepted):
                done += self._close()
                self.open = _Open(drafts - self.drafts, accepted - self.accepted,
                                  accepted - self.accepted + 1, now_ms)
                self.drafts, self.accepted = drafts, accepted
            elif self.open is None or len(self.open.tokens) >= self.open.size:
                done += self._close()
                self.open = _Open(0, 0, 1, now_ms)
            self.open.tokens.append(token)
        return done

    def finish(self) -> list[Step]:
        """The last step, and the finish reason on it when the final chunk came."""
        steps = self._close()
        if steps and self.final is not None:
            steps[-1] = Step(steps[-1].tokens, steps[-1].stats, self.finish_reason)
        return steps

    @property
    def finish_reason(self) -> str:
        if self.final is None:
            return "error"
        if self.final.get("truncated"):
            return "context"
        return STOP_TYPES.get(str(self.final.get("stop_type")), "stop")

    def _prompt(self, timings: dict[str, Any]) -> None:
        if self.first and "prompt_ms" in timings:
            self.prompt_ms = _ms(timings, "prompt_ms", 0.0)
            self.prompt_tokens = _int(timings, "prompt_n")

    def _close(self) -> list[Step]:
        step, self.open = self.open, None
        if step is None:
            return []
        d, a, n = step.drafts, step.accepted, len(step.tokens)
        if d == 0:
            kinds = ["target"] * n
        else:
            kinds = ["accepted"] * min(n, a)
            if n > a:
                kinds.append("bonus" if a == d else "resampled")
        tokens = tuple(Token(id=i, kind=k, p=p, q=1.0 if k == "accepted" else None, text=t)
                       for (i, t, p), k in zip(step.tokens, kinds))
        ms = max(0.0, step.start_ms - self.prev_ms)
        self.prev_ms = step.start_ms
        first, self.first = self.first, False
        stats = StepStats(
            num_speculative_tokens=(self.gamma or d) if d else 0,  # γ unknown: the drafts seen
            num_draft_tokens=d,
            num_accepted_tokens=a,  # the server counts what it kept, emitted or not (a stop)
            verify_ms=ms,
            total_ms=ms + (self.prompt_ms if first else 0.0),
            prefill_ms=self.prompt_ms if first else 0.0,
            prefill_tokens=self.prompt_tokens if first else 0,
        )
        return [Step(tokens, stats)]


def _int(d: dict[str, Any], key: str) -> int:
    value = d.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MalformedChunk(f"'timings.{key}' is not a count")
    return value


def _ms(d: dict[str, Any], key: str, default: float) -> float:
    value = d.get(key, default)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1e12:
        raise MalformedChunk(f"'timings.{key}' is not a time in ms")
    return float(value)


def _probability(chunk: dict[str, Any]) -> float | None:
    """p of the emitted token when the request asked for ``n_probs`` (post-sampling)."""
    probs = chunk.get("completion_probabilities")
    if not isinstance(probs, list) or not probs or not isinstance(probs[-1], dict):
        return None
    value = probs[-1].get("prob")
    return float(value) if isinstance(value, (int, float)) and 0 <= value <= 1 else None
