"""A multi-turn chat over the engine (templates, detokenisation): what the UI, the recorder,
``specchat run`` and bench consume live; replay yields the same events from a file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from specchat.engine.gamma.controller import make_controller
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.engine.template import ChatTemplate
from specchat.events import MESSAGE_TOO_LONG, Step, Token
from specchat.telemetry import ChatTelemetry
from specchat.turn import Conversation, TurnPlan

class IncrementalDecoder:
    """Text for each new token id, holding back incomplete UTF-8 sequences (the offset
    scheme vLLM and TGI use, so a reply of n tokens costs O(n) decode work)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            new = full[len(prefix):]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.text += new
            return new
        return ""


class ChatSession(Conversation):
    """One conversation with a target model through a :class:`SpeculativeEngine`: the
    engine is its source of steps; :class:`~specchat.turn.Conversation` runs the turn."""

    def __init__(self, engine: SpeculativeEngine, tokenizer: Any, *, sampling: SamplingParams = SamplingParams(),
                 max_new_tokens: int = 512, system_prompt: str | None = None, enable_thinking: bool | None = None,
                 overflow: str = "rolling", suffix_store: Any = None) -> None:
        proposer = engine.proposer
        super().__init__(ChatTelemetry(max_gamma=proposer.max_speculative_tokens if proposer else 1),
                         max_new_tokens=max_new_tokens)
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.template = ChatTemplate(tokenizer, system_prompt=system_prompt, enable_thinking=enable_thinking)
        self.stop_token_ids = self.template.stop_token_ids
        self._alt_text: dict[int, str] = {}
        self._notice = engine.notice  # said once, with the next turn
        self.suffix_store = suffix_store  # an OpenedStore: each finished reply goes into it
        if suffix_store is not None and suffix_store.notice:
            self._notice = " ".join(filter(None, (self._notice, suffix_store.notice)))
        # a chat that outgrows the context: "rolling" drops its earliest turns from what the
        # model sees (never the system prompt; the history and recording keep them), "stop"
        # lets the reply end for want of room ("context")
        self.overflow = overflow

    # --- controls (safe to call between turns; γ and temperature also mid-turn for the next turn)
    def cancel(self) -> None:
        self.engine.cancel()

    def reset(self) -> None:
        self.history = []
        self.engine.reset()

    def set_num_speculative_tokens(self, gamma: int | str) -> None:
        proposer = self.engine.proposer
        if proposer is None:
            return
        if gamma != "auto":
            gamma = max(1, int(gamma))
            proposer.max_speculative_tokens = max(proposer.max_speculative_tokens, gamma)
        proposer.num_speculative_tokens = gamma
        before, self.engine.controller = self.engine.controller, make_controller(proposer)
        self.engine.controller.inherit(before)

    def set_temperature(self, temperature: float) -> None:
        """Raises SamplingError (one line) for a NaN, infinite or negative temperature."""
        self.sampling = replace(self.sampling, temperature=float(temperature))

    def set_thinking(self, enabled: bool) -> None:
        self.template.enable_thinking = enabled

    @property
    def num_speculative_tokens(self) -> int | str:
        proposer = self.engine.proposer
        return proposer.num_speculative_tokens if proposer is not None else 0

    # --- the engine as a source of steps
    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.template.prompt_ids(messages)

    def begin_turn(self, messages: list[dict[str, str]]) -> TurnPlan:
        ids = self.prompt_ids(messages)
        note, self._notice = self._notice or "", None
        if self.overflow == "rolling":
            ids, dropped = self._window(messages, ids)
            note = " ".join(filter(None, (note, self._window_note(len(ids), dropped))))
        return TurnPlan(len(ids), self._steps(ids), self.num_speculative_tokens, note, tuple(ids))

    def _window(self, messages: list[dict[str, str]], ids: list[int]) -> tuple[list[int], int]:
        """(the prompt ids with as many of the latest turns as leave room for a reply,
        how many earlier turns were left out). The new message always stays (the template adds
        the system prompt); room for a reply is max_new_tokens, at most half the context."""
        limit = self.engine.target.max_length - min(self.max_new_tokens, self.engine.target.max_length // 2)
        turns = [i for i in range(len(messages) - 1) if messages[i]["role"] == "user"]
        dropped = 0
        while len(ids) > limit and dropped < len(turns):
            dropped += 1
            ids = self.prompt_ids(messages[turns[dropped] if dropped < len(turns) else -1:])
        return ids, dropped

    def take_notice(self) -> str | None:
        notice, self._notice = self._notice, None
        return notice

    def _window_note(self, prompt_tokens: int, dropped: int) -> str:
        """What the rolling window did to this turn's prompt ("" if nothing)."""
        context = self.engine.target.max_length
        reply = min(self.max_new_tokens, context // 2)
        if prompt_tokens + reply > context:  # all history gone, and the message alone is still too long
            return (f"{MESSAGE_TOO_LONG} {prompt_tokens:,} tokens of the model's {context:,}-token "
                    f"context, leaving room for {max(context - prompt_tokens, 0):,} of the reply's {reply:,}: "
                    f"shorten it" + (" (no earlier turn is in the prompt)" if dropped else ""))
        if not dropped:
            return ""
        turns, they = ("turn", "it stays") if dropped == 1 else (f"{dropped} turns", "they stay")
        return (f"the model no longer sees the first {turns} of this chat, to leave room for the reply "
                f"({they} in the transcript and the recording)")

    def _steps(self, ids: list[int]) -> Iterator[Step]:
        decoder = IncrementalDecoder(self.tokenizer)
        reply: list[int] = []
        for step in self.engine.generate(ids, self.sampling, self.max_new_tokens, self.stop_token_ids):
            reply.extend(t.id for t in step.tokens)
            yield Step(tuple(self._with_text(t, decoder) for t in step.tokens), step.stats, step.finish_reason)
        if self.suffix_store is not None and reply:  # a later chat can draft from it
            self._notice = self.suffix_store.remember(reply) or self._notice

    def _with_text(self, token: Token, decoder: IncrementalDecoder) -> Token:
        alternatives = tuple(replace(a, text=self._token_text(a.id)) for a in token.alternatives)
        rejected = "" if token.rejected_id is None else self._token_text(token.rejected_id)  # the inspector shows it
        return replace(token, text=decoder.add(token.id), alternatives=alternatives, rejected_text=rejected)

    def _token_text(self, token_id: int) -> str:
        text = self._alt_text.get(token_id)
        if text is None:
            text = self._alt_text[token_id] = self.tokenizer.decode([token_id])
        return text
