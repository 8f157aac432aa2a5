"""One line above the input: loading progress, or the chat's state and settings."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Label, ProgressBar

from specchat.events import LoadProgress


class StatusLine(Horizontal):
    def compose(self) -> ComposeResult:
        yield Label("", id="status-text")
        yield ProgressBar(total=None, show_eta=False, id="load-progress")

    def on_mount(self) -> None:
        self.query_one(ProgressBar).display = False

    def show_progress(self, progress: LoadProgress, profile: str) -> None:
        bar = self.query_one(ProgressBar)
        bar.display = True
        if progress.total:
            bar.update(total=progress.total, progress=progress.done)
        else:
            bar.update(total=None)
        message = f" — {progress.message}" if progress.message else ""
        self.set_text(f"loading {profile}: {progress.stage}{message}")

    def hide_progress(self) -> None:
        self.query_one(ProgressBar).display = False

    def set_text(self, text: str) -> None:
        # the label fills a one-line bar (1fr wide): new text never changes the layout,
        # and a layout repaints the whole screen on the CPU the model shares
        self.query_one("#status-text", Label).update(Content(text), layout=False)
