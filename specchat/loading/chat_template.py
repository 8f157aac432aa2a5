"""Chat templates (code that came with a model file) render in Jinja's sandbox under a time
and a size budget: past it, one :class:`TemplateBudgetError` line. Design notes: docs/design/loading.md"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable

from jinja2.sandbox import ImmutableSandboxedEnvironment

RENDER_SECONDS = 1.0
# characters of rendered prompt: a 128k-token context is about 0.5 M characters
RENDER_CHARS = 4_000_000
TEMPLATE_FILENAME = "<template>"


class TemplateBudgetError(ValueError):
    """A chat template ran past its time or size budget (one line)."""


class Budget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + RENDER_SECONDS

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"the chat template ran for more than {RENDER_SECONDS:g} s "
                                      f"(a runaway loop?); it was stopped")

    @staticmethod
    def check_size(size: int) -> None:
        if size > RENDER_CHARS:
            raise TemplateBudgetError(f"the chat template renders more than {RENDER_CHARS:,} characters; "
                                      f"it was stopped")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _widest(values: Any) -> int:
    """The largest size, width or count among arguments: a string's or list's length,
    an int, or a number written in a format string ("%0999999999d", "{:>999999999}")."""
    widest = 0
    for value in values:
        widest = max(widest, _size(value))
        if isinstance(value, int) and not isinstance(value, bool):
            widest = max(widest, value)
        elif isinstance(value, str) and ("%" in value or "{" in value):
            widest = max([widest, *(int(digits) for digits in re.findall(r"\d{7,}", value))])
    return widest


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template settings (trim_blocks, lstrip_blocks, loop controls)
    in Jinja's immutable sandbox, with the budget of the render in progress."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"], **options)
        self.budget = Budget()
        self.filters = {name: self._budgeted(f) for name, f in self.filters.items()}

    def _budgeted(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """A filter (``|center(10**9)``, ``|indent``, ``|format``) under the budget; its
        Jinja markers (pass_context…) are kept by ``functools.wraps``."""

        @functools.wraps(function)
        def budgeted(*args: Any, **kwargs: Any) -> Any:
            self._check_arguments(args, kwargs)
            result = function(*args, **kwargs)
            self.budget.check_size(_size(result))
            return result

        return budgeted

    def _check_arguments(self, args: Any, kwargs: Any) -> None:
        self.budget.check_time()
        self.budget.check_size(_widest((*args, *kwargs.values())))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.budget.check_time()
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if _size(seq) and isinstance(count, int):
                    self.budget.check_size(_size(seq) * count)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            if right > 4096:  # a number of thousands of digits renders as thousands of characters
                self.budget.check_size(int(right * abs(left).bit_length() * 0.302))
        elif operator == "+":
            self.budget.check_size(_size(left) + _size(right))
        elif operator == "%":
            self._check_arguments((left,), {})
        return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``ns.text`` each time a loop doubles it with ``~`` (Jinja joins text outside the sandbox)."""
        value = super().getattr(obj, attribute)
        self.budget.check_size(_size(value))
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        self.budget.check_size(_size(value))
        return value

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's names)
        # a width or count: "x".center(10**9), "{:>999999999}".format(1)
        __self.budget.check_time()
        bound_to = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # the str of str.format
        __self._check_arguments((bound_to, *args), kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        __self.budget.check_size(_size(result))
        return result


def render(template: Any, budget: Budget, **context: Any) -> str:
    """``template`` (from a :class:`BudgetedSandbox`) rendered with ``context`` under
    ``budget``; raises TemplateBudgetError past it."""
    template.environment.budget = budget
    pieces: list[str] = []
    size = 0
    with clocked(budget):
        for piece in template.generate(**context):
            size += len(piece)
            budget.check_size(size)
            pieces.append(piece)
    return "".join(pieces)


def budget_transformers_template(tokenizer: Any) -> Any:
    """``tokenizer``, its ``apply_chat_template`` (on the instance only) under the time budget
    and sized before it is tokenised (docs/design/loading.md: what this cannot size)."""
    original = tokenizer.apply_chat_template

    @functools.wraps(original)
    def apply_chat_template(conversation: Any, *args: Any, tokenize: bool = True, **kwargs: Any) -> Any:
        budget = Budget()
        with clocked(budget):
            text = original(conversation, *args, tokenize=False, **kwargs)
        if not isinstance(text, str):  # a batch of conversations: as transformers gives it
            return original(conversation, *args, tokenize=tokenize, **kwargs) if tokenize else text
        budget.check_size(len(text))
        if not tokenize:
            return text
        return tokenizer(text, add_special_tokens=False)["input_ids"]  # as transformers tokenises a render

    tokenizer.apply_chat_template = apply_chat_template
    return tokenizer


@contextlib.contextmanager
def clocked(budget: Budget) -> Iterator[None]:
    """Checks ``budget``'s clock on each line of template code run meanwhile on this
    thread; other frames are not traced line by line, so the cost is one call per
    Python call."""

    def on_line(frame, event, arg):
        if event == "line":
            budget.check_time()
        return on_line

    def on_call(frame, event, arg):
        return on_line if frame.f_code.co_filename == TEMPLATE_FILENAME else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)
