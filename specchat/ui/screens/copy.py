"""Ctrl+O: pick a reply or a code block to copy (the last reply first: Ctrl+O, Enter)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from specchat.ui.copying import CopyChoice


class CopyScreen(ModalScreen[CopyChoice | None]):
    BINDINGS = [Binding("escape,ctrl+o", "close", "Close")]

    def __init__(self, choices: list[CopyChoice]) -> None:
        super().__init__()
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(id="copy-box") as box:
            box.border_title = "copy"
            # model text: a Content, never read as markup
            yield OptionList(*(Option(Content(c.label)) for c in self.choices), id="copy-list")
            yield Static("Enter copies · ↑/↓ choose · Esc closes", id="copy-hint")
        yield Footer()

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.choices[event.option_index])

    def action_close(self) -> None:
        self.dismiss(None)
