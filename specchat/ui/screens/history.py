"""Past sessions: pick one to replay or to reopen and keep chatting. Dismisses with
``(path, "replay" | "resume")`` or None; the list is read in a thread worker.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.containers import Vertical
from textual.widgets import DataTable, Footer

from specchat.sanitize import clean_line
from specchat.sessions.history import SessionSummary, list_sessions

COLUMNS = ("date", "profile", "first prompt", "turns", "tokens", "mean acc. len", "note")


def row(s: SessionSummary) -> tuple[Text, ...]:
    """The table's cells: recorded text, so inert and never read as markup."""
    mal = f"{s.mean_acceptance_length:.2f}" if s.mean_acceptance_length is not None else "–"
    first = clean_line(s.first_prompt)
    prompt = first if len(first) <= 40 else first[:39] + "…"
    cells = (s.date, s.profile, prompt, str(s.turns), str(s.tokens), mal, s.problem or "")
    return tuple(Text(clean_line(cell)) for cell in cells)  # a str cell would be parsed as markup


class HistoryScreen(ModalScreen[tuple[Path, str] | None]):
    BINDINGS = [
        # Priority: the focused table would take Enter for itself, and hide it from the footer.
        Binding("enter", "choose('replay')", "Replay", priority=True),
        Binding("o", "choose('resume')", "Reopen"),
        Binding("escape", "dismiss_none", "Close"),
    ]

    def __init__(self, directory: Path | None = None) -> None:
        super().__init__()
        self.directory = directory
        self.sessions: list[SessionSummary] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="history-box") as box:
            box.border_title = "sessions — Enter replays, o reopens"
            yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        table.loading = True
        self._load()

    @work(thread=True, exclusive=True)
    def _load(self) -> None:
        self.app.call_from_thread(self._show, list_sessions(self.directory))

    def _show(self, sessions: list[SessionSummary]) -> None:
        self.sessions = sessions
        table = self.query_one(DataTable)
        table.loading = False
        for s in sessions:
            table.add_row(*row(s), key=str(s.path))
        if not sessions:
            self.notify("no recorded sessions yet", severity="warning")
        table.focus()

    def action_choose(self, action: str) -> None:
        table = self.query_one(DataTable)
        if not self.sessions or table.cursor_row is None:
            return
        chosen = self.sessions[table.cursor_row]
        if not chosen.replayable:
            self.notify(clean_line(f"cannot open {chosen.path.name}: {chosen.problem}"), severity="error", markup=False)
            return
        self.dismiss((chosen.path, action))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # A click on the selected row.
        event.stop()
        self.action_choose("replay")

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
