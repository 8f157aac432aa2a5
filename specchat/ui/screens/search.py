"""Ctrl+F: search this chat and the recorded sessions; Enter goes to the hit (a place in
the chat, or the session, replayed beside the chat). Dismisses with a Hit or None."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from specchat.ui.searching import Hit, Searchable, search, sessions_texts


class SearchScreen(ModalScreen[Hit | None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("down", "results", "Results", show=False),
    ]

    def __init__(self, chat: list[Searchable]) -> None:
        super().__init__()
        self.chat = chat
        self.sessions: list[Searchable] | None = None  # read in a worker (every recording, parsed)
        self.hits: list[Hit] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box") as box:
            box.border_title = "search this chat and past sessions"
            yield Input(placeholder="words to find…", id="search-input")
            yield OptionList(id="search-results")
            yield Static("reading the sessions…", id="search-hint")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        self._read_sessions()

    @work(thread=True, exclusive=True)
    def _read_sessions(self) -> None:
        self.app.call_from_thread(self._sessions_read, sessions_texts())

    def _sessions_read(self, texts: list[Searchable]) -> None:
        self.sessions = texts
        self._show()

    @on(Input.Changed)
    def _changed(self) -> None:
        self._show()

    def _show(self) -> None:
        query = self.query_one(Input).value
        self.hits = search(query, [*self.chat, *(self.sessions or [])])
        results = self.query_one(OptionList)
        results.clear_options()
        # recorded and model text: Content, never read as markup
        results.add_options(Option(Content(f"{hit.where} — {hit.snippet}")) for hit in self.hits)
        reading = "" if self.sessions is not None else " · reading the sessions…"
        found = f"{len(self.hits)} found" if query.strip() else "type to search"
        self.query_one("#search-hint", Static).update(
            Content(f"{found}{reading} · Enter goes there (a session is replayed beside the chat) · Esc closes"))

    @on(Input.Submitted)
    def _submitted(self) -> None:
        if self.hits:
            self.dismiss(self.hits[0])

    def action_results(self) -> None:
        results = self.query_one(OptionList)
        if self.hits and not results.has_focus:
            results.focus()
            results.highlighted = 0

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.hits[event.option_index])

    def action_close(self) -> None:
        self.dismiss(None)
