"""An assistant reply: tokens styled by provenance, or the same text as Markdown.

Tokens are appended in batches (one per UI drain, not one per token) and the styled
text is rebuilt only when the widget renders, so a fast model costs one render per
frame however many tokens it produced in between.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content, Span
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


class ProvenanceText(Widget):
    """The reply's tokens, rebuilt into styled text lazily on render."""

    DEFAULT_CSS = "ProvenanceText { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens: list[Token] = []
        self._content: Content | None = None

    def append(self, tokens: list[Token]) -> None:
        self.tokens.extend(tokens)
        self._content = None
        self.refresh()
        # a relayout of the screen costs more than repainting the reply: ask for one only
        # when the new text wraps to another number of lines (most batches end mid-line)
        width, height = self.content_size
        if not width or self.get_content_height(self.size, self.app.size, width) != height:
            self.refresh(layout=True)

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
