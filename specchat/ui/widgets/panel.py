"""The speculation side panel: one verdict in plain words and the figures that answer it, the
rest behind a "details" fold (F1 says what each row means). It receives snapshots only, as
often as the app decides.
"""

from __future__ import annotations

from functools import partial

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content, Span
from textual.widgets import Collapsible, Sparkline, Static

from specchat.config.model import MAX_SPECULATIVE_TOKENS
from specchat.telemetry import MetricsSnapshot
from specchat.ui.figures import (DETAILS, Row, breakeven_text, controller_text, figure_rows, histogram_lines, rows_of,
                                 paper_text, position_lines, recommended_gamma_text, source_lines)

LABEL_W, COL_W = 18, 9


def table_content(rows: list[Row]) -> Content:
    header = f"{'':<{LABEL_W}}{'turn':>{COL_W}}{'session':>{COL_W}}"
    lines = [header, *(f"{row.label:<{LABEL_W}}{row.turn:>{COL_W}}{row.session:>{COL_W}}" for row in rows)]
    return Content("\n".join(lines), [Span(0, len(header), "bold $text-muted")])


class SpecPanel(VerticalScroll):
    """``hide_timing`` replaces wall-clock figures with a dot (snapshot tests)."""

    def __init__(self, hide_timing: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hide_timing = hide_timing
        self.method = "none"
        self.gamma: int | str | None = None  # the γ the chat runs at (the verdict says what auto does)
        self._least: dict[str, int] = {}  # selector: lines it is laid out with at least

    def size_for(self, method: str, max_gamma: int, gamma: int | str | None = None) -> None:
        """A profile's figures: its histogram can reach max_gamma + 1 rows, its
        per-position acceptance max_gamma, and the verdicts in words two lines on the
        panel's width, so they are laid out at that height from the start (blank rows
        until used) and do not grow while the model runs. Applied at the next
        ``show(settle=True)``."""
        self.method = method
        self.gamma = gamma
        rows = min(max_gamma, MAX_SPECULATIVE_TOKENS) if isinstance(max_gamma, int) else 0  # a recording's, maybe
        self._least = ({"#histogram": rows + 1, "#positions": rows, "#verdict": 4, "#recommend": 2,
                        "#controller": 2} if method != "none" and rows > 0 else {})

    def compose(self) -> ComposeResult:
        yield Static("", id="panel-title")
        yield Static("", id="verdict")
        yield Static("", id="figures")
        with Collapsible(title="details (F1: what each row means)", collapsed=True, id="details"):
            yield Static("", id="detail-figures")
            yield Static("", id="paper")
            yield Static("", id="recommend")
            yield Static("", id="controller")
            with Collapsible(title="Acceptance histogram (turn)", collapsed=False, id="hist-section"):
                yield Static("", id="histogram")
            with Collapsible(title="Per-position acceptance (turn)", collapsed=False, id="pos-section"):
                yield Static("", id="positions")
            with Collapsible(title="Acceptance per step (turn)", collapsed=False, id="accept-section"):
                yield Sparkline([], id="accept-spark")
            with Collapsible(title="γ per step (session)", collapsed=True, id="gamma-section"):
                yield Sparkline([], id="gamma-spark")

    def on_mount(self) -> None:
        self._shown: dict[str, tuple[tuple, int | None]] = {}  # selector: (text and spans, height shown)
        self._latest: tuple[MetricsSnapshot, MetricsSnapshot] = (MetricsSnapshot(), MetricsSnapshot())
        self.show(*self._latest)

    def on_collapsible_expanded(self, event: Collapsible.Expanded) -> None:
        """The details were left alone while folded (see show): brought up to date now."""
        if event.collapsible.id == "details":
            self._show_details(*self._latest, settle=True)

    def _update(self, selector: str, content: Content, settle: bool = False) -> Static:
        """Sets one figure's text. The panel refreshes while the model runs, and a layout
        of the screen costs the model CPU time (two cores, shared), so an unchanged text
        is left alone and a changed one asks for a layout only when it wraps to more
        lines than before. A figure that gets shorter keeps its height (blank lines
        below) until ``settle``, when a profile is loaded: so after a turn or two the
        panel keeps still, and its figures stay where the eye left them. The
        histograms are laid out at their largest height from the start (size_for)."""
        static = self.query_one(selector, Static)
        key = (content.plain, tuple(content.spans))
        shown = self._shown.get(selector)
        if shown is not None and shown[0] == key and not settle:
            return static
        width = static.content_size.width
        height = content.get_height(static.styles, width) if width else None
        least = self._least.get(selector, 0)
        if shown is not None and None not in (height, shown[1]) and height < shown[1] and not settle:
            least = max(least, shown[1])
        if height is not None and height < least:
            content = content + Content("\n" * (least - height))
            height = least
        if shown is None or shown[0] != key or height != shown[1]:
            static.update(content, layout=shown is None or height is None or height != shown[1])
        self._shown[selector] = (key, height)
        return static

    def show(self, turn: MetricsSnapshot, session: MetricsSnapshot, turn_number: int | None = None,
             settle: bool = False) -> None:
        """Shows the figures; ``settle`` gives every figure its own height again (see _update)."""
        update = partial(self._update, settle=settle)
        title = "Speculation" + (f" · turn {turn_number}" if turn_number is not None else "")
        update("#panel-title", Content(title))
        # the verdict, the recommendation and the controller read the same (session-wide) cost model
        text, level = breakeven_text(session, self.method, self.hide_timing, self.gamma)
        update("#verdict", Content(text)).set_classes(f"-{level}")
        update("#figures", table_content(figure_rows(turn, session, self.hide_timing)))
        self._latest = (turn, session)
        # folded, the details are not drawn: each update would cost a layout of the screen
        if not self.query_one("#details", Collapsible).collapsed:
            self._show_details(turn, session, settle)

    def _show_details(self, turn: MetricsSnapshot, session: MetricsSnapshot, settle: bool = False) -> None:
        update = partial(self._update, settle=settle)
        update("#detail-figures", table_content(rows_of(turn, session, self.hide_timing, DETAILS)))
        update("#paper", Content(paper_text(session, self.hide_timing)))
        update("#recommend", Content(recommended_gamma_text(session, self.hide_timing)))
        update("#controller", Content(controller_text(session, self.hide_timing)))
        hist = histogram_lines(turn.acceptance_histogram, max(turn.gamma_history, default=0)) or ["no drafting steps yet"]
        sources = source_lines(turn.drafts_by_source)
        update("#histogram", Content("\n".join(hist + ([""] + sources if sources else []))))
        pos = position_lines(turn.per_position_acceptance) or ["–"]
        update("#positions", Content("\n".join(pos)))
        self.query_one("#accept-spark", Sparkline).data = list(turn.acceptance_history)
        self.query_one("#gamma-spark", Sparkline).data = [float(g) for g in session.gamma_history]
