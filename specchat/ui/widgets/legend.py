"""The provenance legend under the transcript: each kind in its own style and name."""

from __future__ import annotations

from textual.content import Content, Span
from textual.widgets import Static

from specchat.ui.widgets.provenance_text import KIND_LABELS, KIND_STYLES, kind_styles


def legend_content(view: str = "provenance", note: str = "", styles: dict[str, str] = KIND_STYLES) -> Content:
    text, spans = "", []
    for kind, label in KIND_LABELS.items():
        spans.append(Span(len(text), len(text) + len(label), styles[kind]))
        text += label + "   "
    if view == "markdown":
        text += "(showing Markdown — F3 for provenance)"
    elif note:  # a server's tokens: what their provenance rests on
        text += f"({note})"
    return Content(text, spans)


class Legend(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__(legend_content(), **kwargs)

    view = "provenance"
    note = ""

    def on_mount(self) -> None:
        self._show()  # the app's terminal is known from here: colour alone, or the text markers

    def set_view(self, view: str) -> None:
        self.view = view
        self._show()

    def set_note(self, note: str) -> None:
        """What the provenance rests on when a server made the tokens ("" for the local engine)."""
        self.note = note
        self._show()

    def _show(self) -> None:
        self.update(legend_content(self.view, self.note, kind_styles(self.app)))
