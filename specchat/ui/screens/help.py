"""Help: every key, read from the app's bindings so the list cannot go stale; the token
colours, drawn in the theme's own; and what each row of the speculation panel means."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.ui.glossary import panel_key_lines
from specchat.ui.widgets.legend import legend_content
from specchat.ui.widgets.provenance_text import KIND_STYLES, kind_styles

INPUT_KEYS = [
    ("enter", "send the message"),
    ("shift+enter / ctrl+j", "new line in the message"),
    ("ctrl+p", "command palette: switch profile or theme, set γ or temperature"),
    ("ctrl+q / ctrl+c", "quit (ctrl+c copies instead while text is selected)"),
]


def help_text(bindings: list[Binding], styles: dict[str, str] = KIND_STYLES) -> Content:
    rows = INPUT_KEYS + [(binding.key_display or binding.key, binding.description) for binding in bindings
                         if binding.description]
    width = max(len(k) for k, _ in rows) + 2
    keys = ["Keys", ""] + [f"{k:<{width}}{d}" for k, d in rows]
    colours = ["", "Token colours (the legend under the chat; with NO_COLOR set: resampled",
               "underlined, bonus bold, target italic). F4 inspects the last reply's tokens.", ""]
    panel = ["", "", "The speculation panel (F2 shows or hides it)", ""] + panel_key_lines() + [
        "", "Press Esc or F1 to close."]
    return (Content("\n".join(keys + colours)) + legend_content(styles=styles) + Content("\n".join(panel)))


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", show=False)]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self._bindings_list = bindings

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_text(self._bindings_list, kind_styles(self.app)), id="help-text")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
