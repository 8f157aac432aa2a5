"""Demo scripts: a hands-free sequence of prompts for screen recordings. ``#`` lines are comments,
prompts are paragraphs, and a line starting with ``/`` is a directive: ``/pause SECONDS``,
``/reset``, ``/gamma K|auto``, ``/temperature T``, ``/thinking on|off``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from specchat import untrusted
from specchat.config.model import MAX_SPECULATIVE_TOKENS, parse_gamma
from specchat.config.schema import value_problem
from specchat.errors import SpecchatError
from specchat.events import ChatReset
from specchat.paths import shipped

DIRECTIVES = ("pause", "reset", "gamma", "temperature", "thinking")


@dataclass(frozen=True)
class DemoStep:
    action: str  # "prompt" or one of DIRECTIVES
    value: Any = None
    line: int = 0


def _directive(name: str, arg: str, file: str, line: int) -> DemoStep:
    def bad(expected: str) -> SpecchatError:
        return SpecchatError(f"/{name} {arg!r}: expected {expected}", file=file, line=line)

    if name == "reset":
        return DemoStep("reset", None, line)
    if name == "pause":
        try:
            seconds = float(arg)
        except ValueError:
            raise bad("seconds, e.g. /pause 2") from None
        if seconds < 0:
            raise bad("a non-negative number of seconds")
        return DemoStep("pause", seconds, line)
    if name == "gamma":
        gamma = parse_gamma(arg)
        if gamma is None:
            raise bad(f"a whole number of draft tokens (1 to {MAX_SPECULATIVE_TOKENS}) or 'auto'")
        return DemoStep("gamma", gamma, line)
    if name == "temperature":
        try:
            value = float(arg)
        except ValueError:
            raise bad("a number, e.g. /temperature 0.7") from None
        problem = value_problem("sampling.temperature", value)
        if problem:
            raise bad(f"a temperature that {problem}")
        return DemoStep("temperature", value, line)
    if name == "thinking":
        if arg not in ("on", "off"):
            raise bad("on or off")
        return DemoStep("thinking", arg == "on", line)
    import difflib

    close = difflib.get_close_matches(name, DIRECTIVES, n=1)
    hint = f"did you mean /{close[0]}?" if close else "directives: " + ", ".join("/" + d for d in DIRECTIVES)
    raise SpecchatError(f"unknown directive /{name}", file=file, line=line, hint=hint)


def parse_script(text: str, file: str = "<script>") -> list[DemoStep]:
    """The steps of a script; raises SpecchatError naming the file and line."""
    steps: list[DemoStep] = []
    paragraph: list[str] = []
    start = 0

    def flush() -> None:
        if paragraph:
            steps.append(DemoStep("prompt", "\n".join(paragraph).strip(), start))
            paragraph.clear()

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if line.lstrip().startswith("#"):
            continue
        if not line.strip():
            flush()
        elif line.startswith("/"):
            flush()
            name, _, arg = line[1:].partition(" ")
            steps.append(_directive(name.strip().lower(), arg.strip(), file, number))
        else:
            if not paragraph:
                start = number
            paragraph.append(line)
    flush()
    if not any(s.action == "prompt" for s in steps):
        raise SpecchatError("the demo script has no prompts", file=file, hint="write each prompt as a paragraph")
    return steps


def load_script(path: str | os.PathLike[str] | None) -> list[DemoStep]:
    """A script file, or the shipped ``demos/tour.txt`` when ``path`` is None."""
    path = Path(path) if path is not None else shipped("demos") / "tour.txt"
    try:
        text = untrusted.read_text(path)
    except OSError as exc:
        raise SpecchatError(f"cannot read the demo script: {exc.strerror}", file=str(path)) from None
    except untrusted.Unreadable as exc:
        raise SpecchatError(f"cannot read the demo script: {exc}", file=str(path), hint="save it as UTF-8") from None
    return parse_script(text, str(path))


class ScriptedBackend:
    """A live ChatBackend played by a script: to the UI an EventSource (it declares it
    takes no messages, so the app plays it hands-free like a replay), while the wrapped
    backend generates — and records — for real. Pauses wait on the cancel flag, so Esc
    stops the demo at once."""

    can_send = False

    def __init__(self, inner: Any, steps: list[DemoStep]) -> None:
        self.inner = inner
        self.steps = steps
        self._cancelled = threading.Event()

    def events(self) -> Iterator[Any]:
        """Every event the steps make the wrapped backend produce (the caller renders and records
        them). Once cancelled a turn under way ends cleanly, and no further step starts."""
        for step in self.steps:
            if self._cancelled.is_set():
                return
            if step.action == "prompt":
                yield from self.inner.send(step.value)
            elif step.action == "pause":
                self._cancelled.wait(step.value)
            elif step.action == "reset":
                self.inner.reset()
                yield ChatReset()  # so a UI fed by this stream clears its transcript too
            elif step.action == "gamma":
                self.inner.set_num_speculative_tokens(step.value)
            elif step.action == "temperature":
                self.inner.set_temperature(step.value)
            elif step.action == "thinking":
                self.inner.set_thinking(step.value)

    def cancel(self) -> None:
        self._cancelled.set()
        self.inner.cancel()

    def close(self) -> None:
        self.inner.close()

    @property
    def turn_metrics(self) -> Any:  # the live chat's, which generates for real
        return self.inner.turn_metrics

    @property
    def session_metrics(self) -> Any:
        return self.inner.session_metrics
