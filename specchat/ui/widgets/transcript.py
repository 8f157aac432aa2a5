"""The conversation: user messages, replies and notes, kept scrolled to the end."""

from __future__ import annotations

from textual.containers import VerticalScroll

from specchat.ui.widgets.reply import NoteView, ReplyView, UserView


class Transcript(VerticalScroll):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.markdown = False

    def on_mount(self) -> None:
        self.anchor()

    def add_user(self, text: str) -> None:
        self.mount(UserView(text))

    def add_reply(self, turn: int, room: int = 0) -> ReplyView:
        """``room``: blank lines the reply opens with until its text needs more."""
        view = ReplyView(turn, markdown=self.markdown)
        view.provenance.make_room(room)
        self.mount(view)
        return view

    def add_note(self, text: str, kind: str = "info", before: ReplyView | None = None) -> None:
        self.mount(NoteView(text, kind), before=before)

    @property
    def replies(self) -> list[ReplyView]:
        return list(self.query(ReplyView))

    @property
    def last_reply(self) -> ReplyView | None:
        replies = self.replies
        return replies[-1] if replies else None

    def set_markdown(self, on: bool) -> None:
        self.markdown = on
        for reply in self.replies:
            reply.set_markdown(on)

    async def clear_chat(self) -> None:
        await self.remove_children()
