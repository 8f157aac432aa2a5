"""One request's reply as its Steps arrive: text (held back where it could begin a stop
string, so nothing handed out is taken back), token counts and vLLM-shaped speculation
figures (docs/design/metrics.md)."""

from __future__ import annotations

import math
from typing import Any

from specchat.engine.session import IncrementalDecoder
from specchat.events import DraftCounts, Step

# our finish reasons → OpenAI's (vLLM says "abort" for a request it cancelled)
FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "abort",
          "error": "error"}


class Reply:
    def __init__(self, tokenizer: Any, num_spec_tokens: int, stop: tuple[str, ...] = ()) -> None:
        self.decoder = IncrementalDecoder(tokenizer)
        self.num_spec_tokens = num_spec_tokens
        self.stop = stop
        self.sent = 0  # characters of the text handed out
        self.cut: int | None = None  # where a stop string began
        self.ids: list[int] = []
        self.finish_reason: str | None = None
        self.drafts = DraftCounts()

    @property
    def text(self) -> str:
        return self.decoder.text[:self.cut]

    @property
    def stopped(self) -> bool:
        """A stop string appeared: the reply is over."""
        return self.cut is not None

    def _new_text(self, last: bool) -> str:
        """The text not yet handed out that can be: up to a stop string, all of it at the
        end, else all but a tail that might begin one."""
        text, start = self.decoder.text, self.sent
        if self.stop and self.cut is None:
            found = [i for i in (text.find(s, start) for s in self.stop) if i >= 0]
            if found:
                self.cut = min(found)
                self.finish_reason = "stop"
                self.sent = self.cut
                return text[start:self.cut]
        end = len(text) if last or not self.stop else len(text) - self._tail(text)
        self.sent = max(start, end)
        return text[start:self.sent]

    def _tail(self, text: str) -> int:
        """Length of the longest end of ``text`` (past what was sent) that begins a stop string."""
        most = min(len(text) - self.sent, max(map(len, self.stop)) - 1)
        return next((n for n in range(most, 0, -1) if any(s.startswith(text[-n:]) for s in self.stop)), 0)

    def add(self, step: Step) -> tuple[str, list[dict[str, Any]]]:
        """The step's new text (see the module's word on stop strings) and its tokens as
        OpenAI logprob entries (token, logprob)."""
        entries = []
        for token in step.tokens:
            piece = self.decoder.add(token.id)
            logprob = math.log(token.p) if token.p else -9999.0
            entries.append({"token": piece, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []})
        self.ids += [t.id for t in step.tokens]
        self.drafts.add(step.stats)
        if self.cut is None and step.finish_reason:
            self.finish_reason = FINISH.get(step.finish_reason, "stop")
        if self.cut is not None:  # the reply ended at a stop string: nothing after it is text
            return "", entries
        return self._new_text(bool(step.finish_reason)), entries

    def spec_stats(self) -> dict[str, Any] | None:
        """vLLM's per-request summary (the module docstring); None without speculation."""
        if not self.num_spec_tokens:
            return None
        d = self.drafts
        return {
            "mean_acceptance_length": d.mean_acceptance_length,
            "draft_acceptance_rate": d.draft_acceptance_rate,
            "acceptance_histogram": {str(j): c for j, c in enumerate(d.acceptance_histogram) if c},
            "num_spec_steps": d.num_drafts,
            "num_accepted_draft_tokens": d.num_accepted_tokens,
            "num_draft_tokens": d.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
            "accepted_per_position": list(d.accepted_per_position),
        }
