"""The one turn loop: a user message in, chat events out, whatever produces the steps (a local
engine or a server): the history, the events, the one telemetry fold and the finish reason. A
source subclasses :class:`Conversation` and says how to begin a turn and, where it differs, how
its failures read and what it adds when the turn ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from specchat.events import ErrorEvent, Step, StepEvent, TurnFinished, TurnStarted, UserMessage
from specchat.telemetry import ChatTelemetry, MetricsSnapshot


@dataclass(frozen=True)
class TurnPlan:
    """What a source says when a turn begins: the prompt's length in tokens (0 where it
    cannot tell before replying), the γ it speculates with, a one-time note for the user,
    and the reply's steps, tokens carrying their text."""

    prompt_tokens: int
    steps: Iterator[Step]
    num_speculative_tokens: int | str = 0
    note: str = ""
    prompt_ids: tuple[int, ...] = ()  # where the source tokenises (events.TurnStarted)


def with_system(system_prompt: str | None, messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` with the profile's system prompt first, unless they start with one (a
    client's own): for ChatTemplate.prompt_ids, and a remote chat's server's template."""
    if system_prompt and (not messages or messages[0]["role"] != "system"):
        return [{"role": "system", "content": system_prompt}, *messages]
    return list(messages)


class Conversation:
    """History, turn numbers and telemetry of one chat, and :meth:`send`, the turn loop.

    ``max_new_tokens`` bounds a reply here only where the source does not bound it
    itself (``bounds_reply`` False: a server may go on sending)."""

    bounds_reply = True
    can_send = True  # a live chat, for the UI (specchat.ui.backend.ChatBackend)

    def __init__(self, telemetry: ChatTelemetry, *, max_new_tokens: int = 512) -> None:
        self.telemetry = telemetry
        self.max_new_tokens = max_new_tokens
        self.history: list[dict[str, str]] = []
        self.turn = 0

    # --- what a source of steps provides
    def begin_turn(self, messages: list[dict[str, str]]) -> TurnPlan:
        raise NotImplementedError

    def cancelled(self) -> bool:
        """Whether the user cancelled the turn (checked after each step)."""
        return False

    def stream_finish(self, last: str) -> str:
        """The finish reason once the steps ran out; ``last`` is the last step's."""
        return last

    def error_line(self, exc: Exception) -> str:
        """One line for the UI when the turn fails; the chat goes on."""
        return f"generation failed: {type(exc).__name__}: {exc}"

    def turn_ended(self, finish: str) -> tuple[dict[str, Any], str | None]:
        """(figures to add to ``TurnFinished.metrics``, a problem to say in one line or None)."""
        return {}, None

    def take_notice(self) -> str | None:
        """Something to tell the user that came up after the turn (a store not saved), once;
        the next turn's note says it too, for a chat that goes on."""
        return None

    def close(self) -> None:
        """Nothing to release: the models belong to whoever loaded them."""

    # --- the conversation
    @property
    def turn_metrics(self) -> MetricsSnapshot:
        return self.telemetry.turn

    @property
    def session_metrics(self) -> MetricsSnapshot:
        return self.telemetry.session

    def send(self, text: str) -> Iterator[Any]:
        """Runs one turn, yielding UserMessage, TurnStarted, StepEvent…, TurnFinished
        (and ErrorEvent before TurnFinished if it failed). The user message and whatever
        was generated — also when cancelled or failed — stay in ``history``."""
        self.turn += 1
        turn = self.turn
        yield UserMessage(turn, text)
        messages = [*self.history, {"role": "user", "content": text}]  # the source adds the system prompt
        self.history.append({"role": "user", "content": text})
        self.telemetry.start_turn()
        start = time.perf_counter()
        reply: list[str] = []
        finish = "error"
        try:
            plan = self.begin_turn(messages)
            yield TurnStarted(turn, plan.prompt_tokens, plan.num_speculative_tokens, plan.note, plan.prompt_ids)
            emitted = 0
            with closing(plan.steps) as steps:  # a break closes the stream now
                for step in steps:
                    self.telemetry.update(step.stats, len(step.tokens))
                    reply.extend(t.text for t in step.tokens)
                    emitted += len(step.tokens)
                    finish = step.finish_reason or finish
                    yield StepEvent(turn, step, time.perf_counter() - start)
                    if self.cancelled():
                        finish = "cancelled"
                        break
                    if not self.bounds_reply and emitted >= self.max_new_tokens:
                        finish = "length"  # whatever the source goes on sending
                        break
                else:
                    finish = "cancelled" if self.cancelled() else self.stream_finish(finish)
        except Exception as exc:  # shown in the UI as one line; the chat goes on
            finish = "error"  # whatever a step said before the source failed
            yield ErrorEvent(self.error_line(exc), turn)
        text_out = "".join(reply)
        self.history.append({"role": "assistant", "content": text_out})
        metrics = self.telemetry.metrics()
        extra, problem = self.turn_ended(finish)
        metrics.update(extra)
        if problem is not None:
            yield ErrorEvent(problem, turn)
        yield TurnFinished(turn, finish, text_out, metrics, time.perf_counter() - start)


def closed_at_quit(turn: int, text: str, t: float) -> TurnFinished:
    """The end of a turn whose loop could not record it (the app quit while a step that
    cannot be interrupted ran on): cancelled, as the loop would have ended it after that
    step, with the text of the steps recorded. The recorder writes it as it closes."""
    return TurnFinished(turn, "cancelled", text, {}, t)
