"""The chat screen: transcript, legend, status, input and the speculation panel, updated a batch
of events at a time (a batch's tokens in one append, the panel at most every PANEL_INTERVAL_S).
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header

from specchat.config.model import MAX_SPECULATIVE_TOKENS
from specchat.events import (MESSAGE_TOO_LONG, ChatReset, ErrorEvent, Loaded, LoadProgress, Notice, ProfileSwitched,
                             SessionHeader, StepEvent, Token, TurnFinished, TurnStarted, UserMessage,
                             context_full_message)
from specchat.ui.figures import Figures, LiveFigures
from specchat.ui.reply_notes import AcceptanceWatch, reply_footer
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.panel import SpecPanel
from specchat.ui.widgets.provenance_text import FIRST_ROOM, lines_to_reserve
from specchat.ui.widgets.reply import ReplyView
from specchat.ui.widgets.status import StatusLine
from specchat.ui.widgets.transcript import Transcript

# The panel's figures are shown at most this often (and at a turn's end): each update
# repaints the panel, ~4 ms of a core the model shares on a small CPU.
PANEL_INTERVAL_S = 1.0


class ChatScreen(Screen):
    # the app's own chat takes messages and, once composed, starts the app's loading; a
    # replay beside it (screens/replay.py) shows a recording and does neither
    LIVE = True

    class Ready(Message):
        """The screen is composed: the app may start loading and report progress."""

    def __init__(self, hide_timing: bool = False, cursor_blink: bool = True, id: str = "chat") -> None:
        super().__init__(id=id)
        self.hide_timing = hide_timing
        self.cursor_blink = cursor_blink
        self.figures = LiveFigures()
        self.watch = AcceptanceWatch()  # says when acceptance collapses or γ = auto sets drafting aside
        self.current: ReplyView | None = None
        self._panel_dirty = False
        self._prompt_tokens = 0
        # set by the app when a live model comes in (a switch, a reopened chat): its cache
        # holds none of the chat, so its first reply reads all of it first (21 s for a few
        # turns on a CPU), which a note then says
        self.fresh_model = False
        self._turn_explained = False  # the turn's note said its message is too long for the context
        self._reply_lines_per_s: float | None = None  # the last reply's pace (its box's opening room)

    def compose(self) -> ComposeResult:
        yield Header(icon="≈")
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield Transcript(id="transcript")
                yield Legend(id="legend")
                yield StatusLine(id="status")
                if self.LIVE:
                    yield ChatInput(id="input", placeholder="Message… (Enter sends, Shift+Enter or Ctrl+J: new line)")
            yield SpecPanel(hide_timing=self.hide_timing, id="panel")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(PANEL_INTERVAL_S, self.flush_panel)
        if not self.LIVE:
            return
        self.query_one(ChatInput).cursor_blink = self.cursor_blink
        self.query_one(ChatInput).focus()
        self.post_message(self.Ready())

    def _on_timer_update(self) -> None:
        """Textual's paint tick: it draws between the model's steps (see step_gate.py).
        A private method of Textual's Screen (Textual has no public hook around a paint):
        textual is pinned to its major, and tests/ui/test_textual_hook.py fails by name if an
        upgrade renames it or stops painting through it."""
        with self.app.gate.drawing():
            super()._on_timer_update()

    # --- widgets ------------------------------------------------------------------
    @property
    def can_show(self) -> bool:
        """Whether events can be applied: the screen is mounted (its composed widgets, the
        transcript among them, mount before it) and still attached. Once the app exits,
        Textual counts every widget detached and mounting one raises MountError; a quit
        that lands while a drain is still queued (it waits for the drain interval, or for
        the quit's grace period, which holds the app's queue) would otherwise crash the app
        with exit code 1. The workers have recorded every event by then: the UI showing
        them is all that is skipped."""
        return self.is_mounted and self.is_attached

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def panel(self) -> SpecPanel:
        return self.query_one(SpecPanel)

    @property
    def status(self) -> StatusLine:
        return self.query_one(StatusLine)

    @property
    def input(self) -> ChatInput:
        return self.query_one(ChatInput)

    @property
    def last_tokens(self) -> list[Token]:
        reply = self.transcript.last_reply
        return list(reply.tokens) if reply else []

    def flush_panel(self, force: bool = False, settle: bool = False) -> None:
        """Shows the figures if they changed (or ``force``); ``settle``: see SpecPanel.show."""
        if self._panel_dirty or force:
            self._panel_dirty = False
            self.panel.show(self.figures.turn, self.figures.session, self.figures.turn_number, settle=settle)

    def reset_figures(self, max_gamma: int, method: str, gamma: int | str = "auto") -> None:
        """A profile loaded: its figures start over; the panel makes room for the γ it
        drafts at (``gamma``: a number, or "auto" up to ``max_gamma``)."""
        # another model: its figures, and what its usual acceptance is, start over
        self.figures, self.watch = LiveFigures(), AcceptanceWatch()
        deepest = max_gamma if gamma == "auto" else gamma if isinstance(gamma, int) else 0
        self.panel.size_for(method, deepest, gamma)
        self.flush_panel(force=True, settle=True)

    # --- events -------------------------------------------------------------------
    def apply_events(self, events: list[Any]) -> None:
        """Applies a batch in order; consecutive tokens are appended in one go."""
        pending: list[Token] = []
        for event in events:
            if isinstance(event, Figures):  # the source's snapshots: no break in the tokens
                self.figures.apply(event)
                self._panel_dirty = True
                notices = self.watch.observe(event.session, self.panel.gamma, self.hide_timing)
                if notices:
                    self._flush_tokens(pending)  # a notice goes under what the reply said so far
                    pending = []
                    self._notice(notices)
                continue
            if isinstance(event, StepEvent):
                self._panel_dirty = True
                if self.current is None or self.current.turn != event.turn:
                    self._flush_tokens(pending)
                    pending = []
                    self._reply_for(event.turn)
                pending.extend(event.step.tokens)
                continue
            self._flush_tokens(pending)
            pending = []
            self._apply(event)
        self._flush_tokens(pending)

    def _reply_for(self, turn: int) -> ReplyView:
        """The reply box of ``turn``: the one up since its message, or a new one. An empty
        box of another turn (one that never began) goes."""
        if self.current is None or self.current.turn != turn:
            self.turn_ended()
            self.current = self.transcript.add_reply(turn)
        return self.current

    def _waiting_reply(self) -> ReplyView | None:
        """The reply box still waiting for its first token: what is said meanwhile goes
        above it, as it did before the box went up early."""
        reply = self.current
        return reply if reply is not None and not reply.tokens else None

    def turn_ended(self) -> None:
        """The worker's turn is over, or another reply begins: a reply that got no TurnFinished (a
        recording cut short, a backend that failed before its turn began) loses its blank room, or
        goes if nothing was written."""
        reply, self.current = self.current, None
        if reply is None or reply.finish_reason is not None:
            return
        if reply.tokens:
            reply.provenance.finish()
        else:
            reply.remove()

    def _notice(self, notices: list[str]) -> None:
        """Drafting changed character (reply_notes.AcceptanceWatch): said in the chat, where
        it happened, and in a toast."""
        for text in notices:
            self.transcript.add_note(text, "warning")
            self.notify(text, severity="warning", timeout=10, markup=False)

    def _flush_tokens(self, tokens: list[Token]) -> None:
        if tokens and self.current is not None:
            self.current.append_tokens(tokens)

    def _apply(self, event: Any) -> None:
        transcript = self.transcript
        if isinstance(event, UserMessage):
            self.turn_ended()  # one whose TurnFinished never came
            transcript.add_user(event.text)
            # the reply's box goes up with the message: one layout for both (each is a full
            # one, taken from the model's cores), and the turn is seen to have begun; it
            # opens with the room the last reply's pace would fill (a layout fewer again)
            room = lines_to_reserve(0, self._reply_lines_per_s or 0.0, self.screen.size.height)
            self.current = transcript.add_reply(event.turn, room=max(FIRST_ROOM, room))
        elif isinstance(event, TurnStarted):
            self.figures.apply(event)
            gamma = event.num_speculative_tokens
            self._prompt_tokens = event.prompt_tokens
            self._turn_explained = MESSAGE_TOO_LONG in event.note
            self._reply_for(event.turn)
            if event.note:  # e.g. speculation off for this model: said once, above the reply
                transcript.add_note(event.note, before=self.current)
            if self.fresh_model and event.turn > 1 and event.prompt_tokens:
                transcript.add_note(f"re-reading the chat ({event.prompt_tokens:,} tokens): the new model has none "
                                    "of it cached yet", before=self.current)
            self.fresh_model = False
            # border titles are markup: only a number or "auto" goes in
            known = gamma in ("auto", *range(1, MAX_SPECULATIVE_TOKENS + 1))
            self.current.border_title = f"assistant · γ {gamma}" if known else "assistant"
            self._panel_dirty = True
        elif isinstance(event, TurnFinished):
            self.figures.apply(event)
            reply = self._reply_for(event.turn)
            reply.finish(event.finish_reason, event.text)
            if "turn" in (event.metrics or {}):  # a recording cut short may carry none
                reply.set_footer(reply_footer(self.figures.turn, self.hide_timing))
            self._notice(self.watch.observe(self.figures.session, self.panel.gamma, self.hide_timing))
            self._reply_lines_per_s = reply.provenance.lines_per_s or self._reply_lines_per_s
            # said once: under the rolling window the turn's note has said why already
            if event.finish_reason == "context" and not reply.tokens and not self._turn_explained:
                transcript.add_note(context_full_message(self._prompt_tokens), "warning")
            self.current = None
            self.flush_panel(force=True)
        elif isinstance(event, Notice):
            transcript.add_note(event.message, "warning", before=self._waiting_reply())
            self.notify(event.message, severity="warning", timeout=10, markup=False)
        elif isinstance(event, ErrorEvent):
            transcript.add_note(event.message, "error", before=self._waiting_reply())
        elif isinstance(event, ChatReset):
            self.current = None
            transcript.add_note("— new chat —")
        elif isinstance(event, ProfileSwitched):
            transcript.add_note(f"— switched to profile {event.name} —")
        elif isinstance(event, Loaded):
            transcript.add_note(f"profile {event.profile_name} loaded" + (f": {event.description}" if event.description else ""))
        elif isinstance(event, (SessionHeader, LoadProgress)):
            pass  # shown by the app's status line, or nothing to show
