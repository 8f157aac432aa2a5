"""An assistant reply: tokens styled by provenance (provenance_text.py) or the same text as
Markdown, appended a batch per UI drain; user messages and the app's notes in the transcript.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Markdown, Static

from specchat.events import FINISH_NOTES, Token
from specchat.ui.widgets.provenance_text import ProvenanceText


class ReplyView(Vertical):
    """One assistant turn. ``text`` is the authoritative reply text once finished
    (the engine's TurnFinished.text); while streaming it is the tokens' text."""

    def __init__(self, turn: int, markdown: bool = False) -> None:
        super().__init__(classes="reply")
        self.turn = turn
        self.border_title = "assistant"
        self._markdown_mode = markdown
        self._final_text: str | None = None
        self.finish_reason: str | None = None
        self.provenance = ProvenanceText()
        self._markdown: Markdown | None = None
        # the reply's figures once it is over (reply_notes.reply_footer); hidden till then
        self.footer = Static("", classes="reply-footer")
        self.footer.display = False

    def compose(self) -> ComposeResult:
        yield self.provenance
        yield self.footer

    @property
    def tokens(self) -> list[Token]:
        return self.provenance.tokens

    @property
    def text(self) -> str:
        return self._final_text if self._final_text is not None else "".join(t.text for t in self.tokens)

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

    def set_footer(self, text: str) -> None:
        """The reply's figures under its text (numbers and words of ours: no markup read)."""
        self.footer.update(Content(text))
        self.footer.display = bool(text)

    def set_markdown(self, on: bool) -> None:
        self._markdown_mode = on
        if on and self._markdown is None:
            self._markdown = Markdown(self.text, classes="reply-markdown")
            self.mount(self._markdown, before=self.footer)
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
        self.text = text
        self.border_title = "you"
