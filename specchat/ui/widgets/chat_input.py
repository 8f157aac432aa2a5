"""The message box: Enter sends, Shift+Enter (or Ctrl+J / Alt+Enter) starts a new line. Most
terminals send one byte for Enter and Shift+Enter (Textual tells them apart only with the kitty
keyboard protocol), so Ctrl+J is the newline that works everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = ("shift+enter", "ctrl+j", "alt+enter", "newline")


class ChatInput(TextArea):
    @dataclass
    class Submitted(Message):
        text: str

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.submit()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)

    def submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        self.post_message(self.Submitted(text))

    def take(self) -> str:
        """The text, clearing the box (called once the message is accepted)."""
        text = self.text
        self.clear()
        return text
