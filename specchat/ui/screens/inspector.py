"""The token inspector: walk the last reply's tokens and see why each one is there."""

from __future__ import annotations

from rich.style import Style
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from specchat.events import Token
from specchat.methods import METHODS
from specchat.ui.figures import fmt
from specchat.ui.widgets.provenance_text import KIND_LABELS, kind_styles, provenance_content


def rejected_label(token: Token) -> str:
    """The rejected draft by its text (repr: a space or a newline shows), its id beside;
    by the target's top alternatives' text where the token carries none (a recording made
    before it did); by id alone where neither knows it."""
    text = token.rejected_text or next((a.text for a in token.alternatives if a.id == token.rejected_id and a.text), "")
    return f"{text!r} (id {token.rejected_id})" if text else f"id {token.rejected_id}"


def token_details(token: Token, index: int, total: int) -> str:
    """Plain-text facts about one token (p, q, min(1, p/q), rejected draft, alternatives)."""
    # a recording is untrusted: only names we know are shown (a hybrid's tokens name the proposer it routed to)
    drafter = f", drafted by {METHODS[token.source].title if token.source in METHODS else 'another proposer'}" if token.source else ""
    lines = [
        f"token {index + 1} of {total}: {token.text!r} (id {token.id})",
        f"provenance: {KIND_LABELS.get(token.kind, token.kind)}{drafter}",
        f"p(x) target: {fmt(token.p, 4)}",
    ]
    if token.kind == "accepted":
        lines.append(f"q(x) draft:  {fmt(token.q, 4)}")
        lines.append(f"acceptance probability min(1, p/q): {fmt(token.acceptance_probability, 4)}")
    elif token.kind == "resampled":
        lines.append(f"rejected draft: {rejected_label(token)} with p {fmt(token.rejected_p, 4)}, "
                     f"q {fmt(token.rejected_q, 4)}")
        lines.append(f"its acceptance probability min(1, p/q): {fmt(token.acceptance_probability, 4)}")
        lines.append("this token was drawn from norm(max(p − q, 0))")
    elif token.kind == "bonus":
        lines.append("every draft of the step was accepted; this extra token was drawn from p")
    else:
        lines.append("a plain target sample (no draft at this position)")
    if token.alternatives:
        lines += ["", "target's top alternatives:"]
        lines += [f"  {alt.text or f'id {alt.id}'!r:<18} p {alt.p:.4f}" for alt in token.alternatives]
    return "\n".join(lines)


class TokenText(Static):
    """The reply's tokens, each a link that selects it, drawn in its provenance style
    alone: Textual's link style (underlined, in the text colour) would hide the
    provenance colour of every token."""

    @property
    def link_style(self) -> Style:
        return Style()


class InspectorScreen(ModalScreen[None]):
    # Priority: the scrollable reply above would otherwise take Home/End and arrows.
    BINDINGS = [
        Binding("left", "move(-1)", "Prev token", priority=True),
        Binding("right", "move(1)", "Next token", priority=True),
        Binding("home", "jump(0)", "First", show=False, priority=True),
        Binding("end", "jump(-1)", "Last", show=False, priority=True),
        Binding("n", "next_event", "Next resampled/bonus", priority=True),
        Binding("escape,f4", "close", "Close"),
    ]

    index: reactive[int] = reactive(0)

    def __init__(self, tokens: list[Token], start: int | None = None) -> None:
        super().__init__()
        self.tokens = tokens
        self.set_reactive(InspectorScreen.index, (len(tokens) - 1) if start is None else start)

    def compose(self) -> ComposeResult:
        with Vertical(id="inspector-box"):
            with VerticalScroll(id="inspector-reply"):
                yield TokenText("", id="inspector-text")
            yield Static("", id="inspector-details")
            yield Static("←/→ move · click a token · n: next resampled or bonus · Esc: close", id="inspector-hint")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_view()

    def watch_index(self) -> None:
        if self.is_mounted:
            self.refresh_view()

    def refresh_view(self) -> None:
        text = self.query_one("#inspector-text", Static)
        details = self.query_one("#inspector-details", Static)
        if not self.tokens:
            text.update(Content("the last reply has no tokens to inspect"))
            details.update("")
            return
        text.update(provenance_content(self.tokens, highlight=self.index, clickable=True, styles=kind_styles(self.app)))
        details.update(Content(token_details(self.tokens[self.index], self.index, len(self.tokens))))

    @property
    def token(self) -> Token | None:
        return self.tokens[self.index] if self.tokens else None

    def action_select(self, index: int) -> None:  # a click on token ``index`` (provenance_content)
        if self.tokens:
            self.index = max(0, min(len(self.tokens) - 1, index))

    def action_move(self, delta: int) -> None:
        self.action_select(self.index + delta)

    def action_jump(self, where: int) -> None:
        self.action_select(where if where >= 0 else len(self.tokens) - 1)

    def action_next_event(self) -> None:
        """Jump to the next resampled or bonus token — where the interesting things happen."""
        for i in range(self.index + 1, len(self.tokens)):
            if self.tokens[i].kind in ("resampled", "bonus"):
                self.action_select(i)
                return
        self.notify("no resampled or bonus token after this one")

    def action_close(self) -> None:
        self.dismiss(None)
