"""The chat-level backend shared by remote engines. A server failure is one ErrorEvent line;
the partial reply is kept (and recorded), and the next message makes a fresh request."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from typing import Any

from specchat.events import LoadProgress, Step
from specchat.remote.http import Endpoint, RemoteError
from specchat.remote.metrics import BadCounters, counter_delta, spec_counters
from specchat.remote.servers import UNDERIVABLE, support_line
from specchat.telemetry import ChatTelemetry
from specchat.turn import Conversation, TurnPlan, with_system

# how often a turn waiting on the network looks at Esc (s)
CANCEL_POLL_S = 0.05


class RemoteChat(Conversation):
    """One conversation with a server, its source of steps. Subclasses implement
    :meth:`describe` (what the server serves) and :meth:`stream_steps`."""

    backend = "remote"
    label = "a server"
    bounds_reply = False  # a server may go on sending past max_new_tokens

    @classmethod
    def connect(cls, profile, progress=None):
        """Checks the server answers and reads what it serves; RemoteError (one line) if not."""
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
        gamma = int(info.get("server_num_speculative_tokens") or 8)
        super().__init__(ChatTelemetry(max_gamma=max(1, gamma), underivable=UNDERIVABLE),
                         max_new_tokens=int(profile.sampling.max_new_tokens))
        self.endpoint = endpoint
        self.profile = profile
        self.info = info
        self.temperature = float(profile.sampling.temperature)
        self.num_speculative_tokens: int | str = info.get("server_num_speculative_tokens", 0)
        self._cancel = threading.Event()
        self._counters_before: Any = None
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

    # --- the server as a source of steps
    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """The prompt's length in tokens, or 0 where the server cannot say before replying."""
        return 0

    def stream_steps(self, messages: list[dict[str, str]]) -> Iterator[Step]:
        raise NotImplementedError

    def server_counters(self) -> dict[str, Any] | None:
        """The server's speculation counters now, or None where it exposes no /metrics.
        Raises BadCounters when they fail validation."""
        try:
            text = self.endpoint.get_text("/metrics")
        except RemoteError:
            return None
        return spec_counters(text, self.backend)

    def _counters_across(self, before: Any) -> tuple[dict[str, Any] | None, str | None]:
        """(the server's counters across the turn, or None; what was wrong with them, or None).
        ``before`` is the counters at its start, None, or the BadCounters they raised."""
        try:
            if isinstance(before, BadCounters):
                raise before
            after = None if before is None else self.server_counters()
            return (None if after is None else counter_delta(before, after)), None
        except BadCounters as exc:
            return None, f"{self.endpoint.url}{exc.message}; the server's own counters are left out of this turn"

    def _network(self, messages: list[dict[str, str]], cancel: threading.Event) -> Iterator[tuple[str, Any]]:
        """The turn's requests on a thread of their own (docs/design/remote.md, "Cancelling"):
        yields ("before", counters or BadCounters), ("started", prompt tokens), then ("step",
        Step)…; ends as soon as ``cancel`` is set. Leaving early shuts the stream."""
        left = threading.Event()

        def requests(put: Callable[[Any], None]) -> None:
            try:
                put(("before", self.server_counters()))
            except BadCounters as exc:  # said when the turn ends
                put(("before", exc))
            if cancel.is_set():
                return
            put(("started", self.prompt_tokens(messages)))
            if cancel.is_set():
                return
            with closing(self.stream_steps(messages)) as steps:
                for step in steps:
                    put(("step", step))
                    if left.is_set() or cancel.is_set():
                        return

        ended = False
        try:
            ended = yield from _on_thread(requests, cancel, f"remote-turn-{self.turn}")
        finally:
            if not ended:  # left before the requests did: shut the stream, if it is open yet
                left.set()
                self.endpoint.abort()

    @staticmethod
    def _unless_cancelled(request: Any, cancel: threading.Event) -> Any:
        """``request()`` made on a thread of its own: what it returns (or raises), or None
        as soon as ``cancel`` is set (the request is left to end at its own timeout)."""
        for answer in _on_thread(lambda put: put(request()), cancel, "remote-request"):
            return answer
        return None

    def send(self, text: str) -> Iterator[Any]:
        # this turn's own cancel, made at the turn's first step: a request an earlier
        # turn abandoned keeps seeing its own
        self._cancel = threading.Event()
        yield from super().send(text)

    def begin_turn(self, messages: list[dict[str, str]]) -> TurnPlan:
        """Starts the turn's requests on their own thread and waits, Esc-able, until the
        server's counters are read and the prompt's length is known. Cancelled before that,
        the plan has no steps and the loop closes the turn as cancelled."""
        self.finish_reason = "error"
        self._counters_before = None
        answers = self._network(with_system(self.profile.chat.system_prompt, messages), self._cancel)
        prompt_tokens = 0
        for kind, value in answers:
            if kind == "before":
                self._counters_before = value
            elif kind == "started":
                prompt_tokens = value
                break
        return TurnPlan(prompt_tokens, self._steps(answers), self.num_speculative_tokens)

    @staticmethod
    def _steps(answers: Iterator[tuple[str, Any]]) -> Iterator[Step]:
        with closing(answers):  # closing the steps (a break in the loop) shuts the stream
            for kind, value in answers:
                if kind == "step":
                    yield value

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def stream_finish(self, last: str) -> str:
        return self.finish_reason

    def error_line(self, exc: Exception) -> str:
        if isinstance(exc, RemoteError):
            return str(exc)
        # a protocol surprise: one line, and the chat goes on
        return self.endpoint.shown(f"remote generation failed: {type(exc).__name__}: {exc}")

    def turn_ended(self, finish: str) -> tuple[dict[str, Any], str | None]:
        """The server's own counters across this turn (exact only with one client at a
        time); not after a cancel, nor past one: that would wait on the server the user
        just left (they are read on a thread of their own, and Esc leaves them unread)."""
        if finish == "cancelled":
            return {}, None
        before = self._counters_before
        counters, problem = self._unless_cancelled(lambda: self._counters_across(before), self._cancel) or (None, None)
        return ({} if counters is None else {"server": counters}), (
            None if problem is None else self.endpoint.shown(problem, 400))


def _on_thread(work: Callable[[Callable[[Any], None]], None], cancel: threading.Event, name: str
               ) -> Generator[Any, None, bool]:
    """Runs ``work(put)`` on a thread of its own and yields what it puts, raising what it
    raises (handed to the turn, which says it in one line); returns True when it ended,
    False as soon as ``cancel`` is set, whatever the thread still waits on."""
    answers: queue.SimpleQueue = queue.SimpleQueue()

    def run() -> None:
        try:
            work(lambda item: answers.put(("item", item)))
        except BaseException as exc:  # noqa: BLE001 — re-raised in the caller's thread
            answers.put(("error", exc))
        finally:
            answers.put(("done", None))

    threading.Thread(target=run, name=name, daemon=True).start()
    while True:
        try:
            kind, value = answers.get(timeout=CANCEL_POLL_S)
        except queue.Empty:
            if cancel.is_set():
                return False
            continue
        if kind == "done":
            return True
        if kind == "error":
            raise value
        yield value
