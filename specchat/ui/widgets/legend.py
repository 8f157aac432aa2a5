"""The provenance legend under the transcript: each kind in its own style and name."""

from __future__ import annotations

from textual.content import Content, Span
from textual.widgets import Static

from specchat.ui.widgets.reply import KIND_LABELS, KIND_STYLES


def legend_content(view: str = "provenance") -> Content:
    parts, spans, offset = [], [], 0
    for kind in ("accepted", "resampled", "bonus", "target"):
        label = KIND_LABELS[kind]
        spans.append(Span(offset, offset + len(label), KIND_STYLES[kind]))
        parts.append(label + "   ")
        offset += len(label) + 3
    text = "".join(parts)
    if view == "markdown":
        text += "(showing Markdown — F3 for provenance)"
    return Content(text, spans)


class Legend(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__(legend_content(), **kwargs)

    def set_view(self, view: str) -> None:
        self.update(legend_content(view))
