"""The app's session keys, a mixin of :class:`specchat.ui.app.SpecchatApp`: the recordings
(replayed, or reopened through the ``reopen`` callable whoever started the app gave it: the UI
loads no model itself), search, and screenshots.
"""

from __future__ import annotations

import os
from pathlib import Path

from specchat.errors import one_line
from specchat.paths import data_dir
from specchat.sanitize import clean_line
from specchat.sessions.private_files import FILE_MODE, private_dir
from specchat.ui.screens.history import HistoryScreen
from specchat.ui.screens.replay import ReplayScreen
from specchat.ui.screens.search import SearchScreen
from specchat.ui.searching import Hit, Searchable
from specchat.ui.widgets.reply import ReplyView, UserView

FOUND_S = 2.0  # how long a place found in the chat stays marked


class SessionControls:
    def action_history(self) -> None:
        if isinstance(self.screen, HistoryScreen):  # the key toggles
            self.screen.dismiss(None)
            return
        self.push_screen(HistoryScreen(), self.open_recording)

    def open_recording(self, choice: tuple[Path, str] | None) -> None:
        """The history screen's result: ``(path, "replay" | "resume")`` or None."""
        if choice is None:
            return
        path, action = choice
        if isinstance(self.screen, ReplayScreen):  # one replay at a time: the one shown goes
            self.pop_screen()
        if action == "replay":  # beside the chat: its model, and a reply it is writing, stay as they are
            self.push_screen(ReplayScreen(path, hide_timing=self.chat.hide_timing, cursor_blink=self.chat.cursor_blink))
            return
        if self.reopen is None:
            self.notify("reopening a session needs a live model — use Enter to replay it", severity="warning")
            return
        try:
            loader = self.reopen(path)  # reads the file: a damaged one is reported here
        except Exception as exc:
            self.notify(clean_line(f"cannot reopen {path.name}: {one_line(exc)}"), severity="error", timeout=10,
                        markup=False)
            return
        # Later profile switches carry this conversation on, so the reopen loader stays.
        self.switch_profile(None, loader=loader, label=path.name, adopt=True)

    def action_search(self) -> None:
        """Ctrl+F: this chat (the one on screen) and the recorded sessions."""
        if isinstance(self.screen, SearchScreen):  # the key toggles
            self.screen.dismiss(None)
            return
        items, replies = [], 0
        for widget in self.view.transcript.children:
            if isinstance(widget, UserView):
                items.append(Searchable(widget, "you · this chat", widget.text))
            elif isinstance(widget, ReplyView):
                replies += 1
                items.append(Searchable(widget, f"reply {replies} · this chat", widget.text))
        self.push_screen(SearchScreen(items), self._go_to)

    def _go_to(self, hit: Hit | None) -> None:
        """A hit in this chat is scrolled to and marked for a moment; one in a session is
        replayed beside the chat."""
        if hit is None:
            return
        if isinstance(hit.target, Path):
            self.open_recording((hit.target, "replay"))
            return
        widget = hit.target
        if not widget.is_attached:  # a new chat cleared it meanwhile
            self.notify("that message is no longer in the chat", severity="warning")
            return
        self.view.transcript.scroll_to_widget(widget, animate=False)
        widget.add_class("-found")
        self.set_timer(FOUND_S, lambda: widget.remove_class("-found"))

    def action_screenshot(self) -> None:
        """An SVG of the screen (the chat in it), private like the recordings: 0600 in a 0700 dir."""
        directory = data_dir() / "screenshots"
        try:
            private_dir(directory)
            saved = self.save_screenshot(path=str(directory))
            os.chmod(saved, FILE_MODE)
        except OSError as exc:
            self.notify(clean_line(f"screenshot not saved: {exc}"), severity="error", markup=False)
            return
        self.notify(clean_line(f"screenshot saved to {saved}"), timeout=8, markup=False)
