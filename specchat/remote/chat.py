"""The chat-level backend shared by remote engines: history, events, telemetry, errors.

A subclass streams one reply as :class:`~specchat.events.Step` objects (tokens with the
provenance the server's data supports, text filled in); this class turns them into
the events a local ``ChatSession`` yields and keeps the conversation. Server failures
(down, HTTP errors, a dropped or malformed stream) become one ErrorEvent line; the
partial reply is kept in the history and in the TurnFinished (so it is recorded), and
the next message makes a fresh request.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

from specchat.events import ErrorEvent, Step, StepEvent, TurnFinished, TurnStarted, UserMessage
from specchat.remote import without_underivable
from specchat.remote.http import Endpoint, RemoteError
from specchat.remote.metrics import BadCounters
from specchat.telemetry import MetricsSnapshot, Telemetry

# how often a turn waiting on the network looks at Esc (s)
CANCEL_POLL_S = 0.05

def remote_snapshot(telemetry: Telemetry) -> MetricsSnapshot:
    return without_underivable(telemetry.snapshot())


class RemoteChat:
    """One conversation with a server. Subclasses implement :meth:`describe` (what the
    server serves) and :meth:`stream_steps`."""

    backend = "remote"
    label = "a server"

    @classmethod
    def connect(cls, profile, progress=None):
        """Checks the server answers and reads what it serves; RemoteError (one line) if not."""
        from specchat.events import LoadProgress
        from specchat.remote import support_line

        report = progress or (lambda event: None)
        endpoint = Endpoint(profile.target.url, profile.target.api_key_env)
        report(LoadProgress(stage="connect", message=f"connecting to {cls.label} at {endpoint.url}"))
        info = cls.describe(endpoint, profile)
        report(LoadProgress(stage="server", message=support_line(info)))
        return cls(endpoint, profile, info)

    @staticmethod
    def describe(endpoint: Endpoint, profile: Any) -> dict[str, Any]:
        raise NotImplementedError

    def __init__(self, endpoint: Endpoint, profile: Any, info: dict[str, Any]) -> None:
        self.endpoint = endpoint
        self.profile = profile
        self.info = info
        self.temperature = float(profile.sampling.temperature)
        self.max_new_tokens = int(profile.sampling.max_new_tokens)
        self.system_prompt = profile.chat.system_prompt
        self.num_speculative_tokens: int | str = info.get("server_num_speculative_tokens", 0)
        self.history: list[dict[str, str]] = []
        self.turn = 0
        self._cancel = threading.Event()
        gamma = int(info.get("server_num_speculative_tokens") or 8)
        self.session_telemetry = Telemetry(max_gamma=max(1, gamma))
        self.turn_telemetry = Telemetry(max_gamma=max(1, gamma))
        self.finish_reason = "error"

    # --- controls: the server owns γ; temperature and thinking go with each request
    def cancel(self) -> None:
        """Ends the turn now, from any thread: the stream's socket is shut from here, so
        a server that trickles bytes or has gone silent is not waited for."""
        self._cancel.set()
        self.endpoint.abort()

    def reset(self) -> None:
        self.history = []

    def set_num_speculative_tokens(self, k: int | str) -> None:
        """γ is the server's setting (its command line); nothing to change per request."""

    def set_temperature(self, temperature: float) -> None:
        self.temperature = max(0.0, float(temperature))

    def set_thinking(self, enabled: bool) -> None:
        """No thinking switch is sent to a server."""

    @property
    def turn_metrics(self) -> MetricsSnapshot:
        return remote_snapshot(self.turn_telemetry)

    @property
    def session_metrics(self) -> MetricsSnapshot:
        return remote_snapshot(self.session_telemetry)

    # --- the conversation
    def messages(self, text: str) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + self.history + [{"role": "user", "content": text}]

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """The prompt's length in tokens, or 0 where the server cannot say before replying."""
        return 0

    def stream_steps(self, messages: list[dict[str, str]]) -> Iterator[Step]:
        raise NotImplementedError

    def server_counters(self) -> dict[str, Any] | None:
        """The server's speculation counters now, or None where it exposes no /metrics.
        Raises BadCounters when they fail validation."""
        from specchat.remote.metrics import spec_counters

        try:
            text = self.endpoint.get_text("/metrics")
        except RemoteError:
            return None
        return spec_counters(text, self.backend)

    def _network(self, messages: list[dict[str, str]], cancel: threading.Event) -> Iterator[tuple[str, Any]]:
        """The turn's requests — the server's counters before it, the prompt's length, the
        stream — made on a thread of their own. Yields ("before", counters or BadCounters),
        ("started", prompt tokens), then ("step", Step)…; raises what they raise; and ends
        as soon as ``cancel`` is set, whatever they wait on: a connect to a host that does
        not answer, a server that never sends its headers (http.py can shut only a stream
        whose connection is made; a request left behind ends at its own timeout, its
        answer unread). Leaving early (cancelled, max_new_tokens) shuts the stream."""
        answers: queue.SimpleQueue = queue.SimpleQueue()
        left = threading.Event()

        def requests() -> None:
            try:
                try:
                    answers.put(("before", self.server_counters()))
                except BadCounters as exc:  # said when the turn ends
                    answers.put(("before", exc))
                if cancel.is_set():
                    return
                answers.put(("started", self.prompt_tokens(messages)))
                if cancel.is_set():
                    return
                with closing(self.stream_steps(messages)) as steps:
                    for step in steps:
                        answers.put(("step", step))
                        if left.is_set() or cancel.is_set():
                            return
            except BaseException as exc:  # handed to the turn, which says it in one line
                answers.put(("error", exc))
            finally:
                answers.put(("done", None))

        threading.Thread(target=requests, name=f"remote-turn-{self.turn}", daemon=True).start()
        ended = False
        try:
            while True:
                try:
                    kind, value = answers.get(timeout=CANCEL_POLL_S)
                except queue.Empty:
                    if cancel.is_set():
                        return
                    continue
                if kind == "done":
                    ended = True
                    return
                if kind == "error":
                    raise value
                yield kind, value
        finally:
            if not ended:  # left before the requests did: shut the stream, if it is open yet
                left.set()
                self.endpoint.abort()

    @staticmethod
    def _unless_cancelled(request: Any, cancel: threading.Event) -> Any:
        """``request()`` made on a thread of its own: what it returns (or raises), or None
        as soon as ``cancel`` is set (the request is left to end at its own timeout)."""
        answer: queue.SimpleQueue = queue.SimpleQueue()

        def run() -> None:
            try:
                answer.put((True, request()))
            except BaseException as exc:
                answer.put((False, exc))

        threading.Thread(target=run, name="remote-request", daemon=True).start()
        while True:
            try:
                ok, value = answer.get(timeout=CANCEL_POLL_S)
            except queue.Empty:
                if cancel.is_set():
                    return None
                continue
            if ok:
                return value
            raise value

    def _counters_across(self, before: Any) -> tuple[dict[str, Any] | None, str | None]:
        """(the server's counters across the turn, or None; what was wrong with them, or None).
        ``before`` is the counters at its start, None, or the BadCounters they raised."""
        from specchat.remote.metrics import counter_delta

        def problem(exc: BadCounters) -> str:
            return f"{self.endpoint.url}{exc.message}; the server's own counters are left out of this turn"

        if before is None or isinstance(before, BadCounters):
            return None, before and problem(before)
        try:
            after = self.server_counters()
        except BadCounters as exc:
            return None, problem(exc)
        try:
            return (None if after is None else counter_delta(before, after)), None
        except BadCounters as exc:
            return None, problem(exc)

    def send(self, text: str) -> Iterator[Any]:
        self.turn += 1
        turn = self.turn
        # this turn's own: a request an earlier turn abandoned keeps seeing its cancel
        cancel = self._cancel = threading.Event()
        yield UserMessage(turn, text)
        messages = self.messages(text)
        self.history.append({"role": "user", "content": text})
        self.turn_telemetry.reset()
        self.turn_telemetry.start_turn()
        self.session_telemetry.start_turn()
        start = time.perf_counter()
        reply: list[str] = []
        finish = "error"
        self.finish_reason = "error"
        before: Any = None
        try:
            with closing(self._network(messages, cancel)) as answers:  # a break leaves the requests now
                for kind, value in answers:
                    if kind == "before":
                        before = value
                        continue
                    if kind == "started":
                        yield TurnStarted(turn, value, self.num_speculative_tokens)
                        continue
                    step = value
                    for telemetry in (self.turn_telemetry, self.session_telemetry):
                        telemetry.update(step.stats, len(step.tokens))
                    reply.extend(t.text for t in step.tokens)
                    yield StepEvent(turn, step, time.perf_counter() - start)
                    if cancel.is_set():
                        finish = "cancelled"
                        break
                    if self.turn_telemetry.num_tokens >= self.max_new_tokens:  # whatever the server goes on sending
                        finish = "length"
                        break
                else:
                    finish = "cancelled" if cancel.is_set() else self.finish_reason
        except RemoteError as exc:
            yield ErrorEvent(str(exc), turn)
        except Exception as exc:  # a protocol surprise: one line, and the chat goes on
            yield ErrorEvent(self.endpoint.shown(f"remote generation failed: {type(exc).__name__}: {exc}"), turn)
        text_out = "".join(reply)
        self.history.append({"role": "assistant", "content": text_out})
        metrics = {"turn": self.turn_metrics.to_dict(), "session": self.session_metrics.to_dict()}
        # the server's own counters across this turn (exact only with one client at a time)
        # (not after a cancel: that would wait on the server the user just left)
        counters, problem = None, None
        if finish != "cancelled":  # Esc while the server is asked leaves them out
            counters, problem = self._unless_cancelled(lambda: self._counters_across(before), cancel) or (None, None)
        if counters is not None:
            metrics["server"] = counters
        if problem is not None:
            yield ErrorEvent(self.endpoint.shown(problem, 400), turn)
        yield TurnFinished(turn, finish, text_out, metrics, time.perf_counter() - start)
