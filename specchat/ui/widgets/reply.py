"""An assistant reply: tokens styled by provenance, or the same text as Markdown.

Tokens are appended in batches (one per UI drain, not one per token) and the styled
text is rebuilt only when the widget renders, so a fast model costs one render per
frame however many tokens it produced in between.
"""

from __future__ import annotations

import time
from typing import Callable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content, Span
from textual.geometry import Region, Size
from textual.widget import Widget
from textual.widgets import Markdown, Static

from specchat.events import Token

# Colour comes from the theme; the text attribute is the cue that survives without it
# (monochrome terminals, colour-blind users). Accepted drafts are the common case, so
# they stay plain.
KIND_STYLES: dict[str, str] = {
    "accepted": "$spec-accepted",
    "resampled": "$spec-resampled underline",
    "bonus": "$spec-bonus bold",
    "target": "$spec-target italic",
}
KIND_LABELS: dict[str, str] = {
    "accepted": "accepted draft",
    "resampled": "resampled",
    "bonus": "bonus",
    "target": "target",
}
FINISH_NOTES = {
    "cancelled": "cancelled",
    "length": "stopped: max_new_tokens reached",
    "context": "stopped: context window full",
    "error": "stopped by an error",
}


def provenance_content(tokens: list[Token], highlight: int | None = None, clickable: bool = False) -> Content:
    """The tokens as styled text; runs of one kind share a span. ``highlight`` reverses
    one token (the inspector's cursor); ``clickable`` makes each token select itself."""
    parts: list[str] = []
    spans: list[Span] = []
    offset = 0
    run_kind, run_start = None, 0
    for index, token in enumerate(tokens):
        text = token.text
        parts.append(text)
        end = offset + len(text)
        if clickable or index == highlight:
            style = KIND_STYLES.get(token.kind, "")
            if index == highlight:
                style += " reverse"
            if clickable:
                style += f" @click=screen.select({index})"
            if run_kind is not None and run_start < offset:
                spans.append(Span(run_start, offset, KIND_STYLES.get(run_kind, "")))
            if end > offset:
                spans.append(Span(offset, end, style.strip()))
            run_kind, run_start = None, end
        elif token.kind != run_kind:
            if run_kind is not None and run_start < offset:
                spans.append(Span(run_start, offset, KIND_STYLES.get(run_kind, "")))
            run_kind, run_start = token.kind, offset
        offset = end
    if run_kind is not None and run_start < offset:
        spans.append(Span(run_start, offset, KIND_STYLES.get(run_kind, "")))
    return Content("".join(parts), spans)


# While a reply streams, its widget is laid out with room for about this many seconds
# of further text (at the rate its lines have been coming), at most MAX_RESERVED_LINES:
# each layout re-arranges and repaints the whole screen (~20 ms of a CPU core that the
# model shares), and a reply that grows a line at a time asked for one every other drain.
RESERVE_S = 2.0
MAX_RESERVED_LINES = 12


def lines_to_reserve(needed: int, lines_per_s: float) -> int:
    """The height to lay a streaming reply out at once it needs ``needed`` lines."""
    return needed + min(MAX_RESERVED_LINES, int(lines_per_s * RESERVE_S))


class ProvenanceText(Widget):
    """The reply's tokens, rebuilt into styled text lazily on render. While streaming it
    keeps some blank lines below the text (see RESERVE_S), dropped when it finishes."""

    DEFAULT_CSS = "ProvenanceText { height: auto; }"

    def __init__(self, clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens: list[Token] = []
        self._content: Content | None = None
        self._clock = clock
        self._reserved = 0  # lines laid out for the text, while streaming
        self._started_at: float | None = None  # when the first tokens came
        self._wrapped = (0, 0)  # (content width, lines) of the text at the last append

    def append(self, tokens: list[Token]) -> None:
        self.tokens.extend(tokens)
        self._content = None
        if self._started_at is None:
            self._started_at = self._clock()
        if not self.display:  # the Markdown view is showing: laid out when shown again
            return
        width, height = self.content_size
        if not width:  # not laid out yet
            self.refresh(layout=True)
            return
        (shown_width, shown), needed = self._wrapped, self.text_height(width)
        self._wrapped = (width, needed)
        if needed > height or shown_width not in (0, width):  # more lines, or resized since
            elapsed = self._clock() - self._started_at
            rate = needed / elapsed if elapsed > 0 else 0.0
            self._reserved = lines_to_reserve(needed, rate)
            self.refresh(layout=True)
        else:
            # only the lines from the old last one (its last word may wrap on) are new:
            # the screen recomposes those, not the whole reply
            first = max(0, shown - 1)
            self.refresh(Region(0, first, width, needed - first))

    def finish(self) -> None:
        """The reply is complete: its height becomes the text's."""
        if self._reserved:
            self._reserved = 0
            self.refresh(layout=True)

    def text_height(self, width: int) -> int:
        """Lines the text wraps to at this content width."""
        return self.render().get_height(self.styles, width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(self.text_height(width), self._reserved)

    def render(self) -> Content:
        if self._content is None:
            self._content = provenance_content(self.tokens)
        return self._content


class ReplyView(Vertical):
    """One assistant turn. ``text`` is the authoritative reply text once finished
    (the engine's TurnFinished.text); while streaming it is the tokens' text."""

    def __init__(self, turn: int, markdown: bool = False, subtitle: str = "") -> None:
        super().__init__(classes="reply")
        self.turn = turn
        self.border_title = "assistant"
        self.border_subtitle = subtitle
        self._markdown_mode = markdown
        self._final_text: str | None = None
        self.finish_reason: str | None = None
        self.provenance = ProvenanceText()
        self._markdown: Markdown | None = None

    def compose(self) -> ComposeResult:
        yield self.provenance

    @property
    def tokens(self) -> list[Token]:
        return self.provenance.tokens

    @property
    def text(self) -> str:
        if self._final_text is not None:
            return self._final_text
        return "".join(t.text for t in self.provenance.tokens)

    def append_tokens(self, tokens: list[Token]) -> None:
        if not tokens:
            return
        self.provenance.append(tokens)
        if self._markdown is not None and self._markdown_mode:
            self._markdown.append("".join(t.text for t in tokens))

    def finish(self, finish_reason: str, text: str | None = None) -> None:
        self.finish_reason = finish_reason
        self.provenance.finish()
        if text is not None:
            self._final_text = text
        note = FINISH_NOTES.get(finish_reason)
        if note:
            self.border_subtitle = note
            self.add_class(f"-{finish_reason}")
        if self._markdown is not None:
            self._markdown.update(self.text)

    def set_markdown(self, on: bool) -> None:
        self._markdown_mode = on
        if on and self._markdown is None:
            self._markdown = Markdown(self.text, classes="reply-markdown")
            self.mount(self._markdown)
        elif on and self._markdown is not None:
            self._markdown.update(self.text)
        self.provenance.display = not on
        if self._markdown is not None:
            self._markdown.display = on


class NoteView(Static):
    """A line in the transcript from the app itself (errors, profile switches)."""

    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(Content(text), classes=f"note -{kind}")


class UserView(Static):
    """What the user sent, shown verbatim (never parsed as markup)."""

    def __init__(self, text: str) -> None:
        super().__init__(Content(text), classes="user")
        self.border_title = "you"
