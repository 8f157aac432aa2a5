"""A reply's tokens as text styled by provenance, cheap to grow. Design notes: docs/design/ui.md"""

from __future__ import annotations

import time
from typing import Callable

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content, Span
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

from specchat.events import Token

# Colour comes from the theme, and where there is colour it is the only cue: bold,
# underlined and italic runs starting and stopping mid-word made prose flicker as it
# streamed. Without colour (NO_COLOR) a text attribute carries the kind instead.
# Accepted drafts are the common case, so they stay plain either way.
KIND_STYLES = {kind: f"$spec-{kind}" for kind in ("accepted", "resampled", "bonus", "target")}
KIND_LABELS = {"accepted": "accepted draft", "resampled": "resampled", "bonus": "bonus", "target": "target"}
KIND_MARKERS: dict[str, str] = {"resampled": "underline", "bonus": "bold", "target": "italic"}
NO_COLOUR_STYLES: dict[str, str] = {kind: f"{style} {KIND_MARKERS.get(kind, '')}".strip()
                                    for kind, style in KIND_STYLES.items()}


def kind_styles(app) -> dict[str, str]:
    """The provenance styles for ``app``'s terminal: colour alone, or with the text
    attributes where colour is off (Textual's ``no_color``, from NO_COLOR)."""
    return NO_COLOUR_STYLES if app.no_color else KIND_STYLES


def provenance_content(tokens: list[Token], highlight: int | None = None, clickable: bool = False,
                       styles: dict[str, str] = KIND_STYLES) -> Content:
    """The tokens as styled text; runs of one kind share a span. ``highlight`` reverses
    one token (the inspector's cursor); ``clickable`` makes each token select itself;
    ``styles``: each kind's (:func:`kind_styles`)."""
    spans: list[Span] = []
    offset = 0
    for index, token in enumerate(tokens):
        end = offset + len(token.text)
        style = styles.get(token.kind, "")
        if index == highlight:
            style += " reverse"
        if clickable:
            style += f" @click=screen.select({index})"
        style = style.strip()
        if spans and spans[-1].end == offset and spans[-1].style == style:  # a run of one kind (never a clickable)
            spans[-1] = Span(spans[-1].start, end, style)
        elif end > offset:
            spans.append(Span(offset, end, style))
        offset = end
    return Content("".join(token.text for token in tokens), spans)


# While a reply streams, its widget is laid out with room for about this many seconds
# of further text (at the rate its lines have been coming): each layout re-arranges and
# repaints the whole screen (~10-20 ms of the CPU the model shares; the model waits for
# it between two steps, see step_gate.py), and a reply that grew a line at a time asked
# for one every other drain. The blank room is
# at most MAX_RESERVED_LINES and a third of the screen's height, so a small terminal
# is not left mostly blank after the reply scrolls up.
RESERVE_S = 4.0
MAX_RESERVED_LINES = 16
FIRST_ROOM = 2  # lines a reply's box opens with at least, before its first tokens (a drain's worth)


def lines_to_reserve(needed: int, lines_per_s: float, screen_height: int) -> int:
    """The height to lay a streaming reply out at once it needs ``needed`` lines."""
    return needed + min(MAX_RESERVED_LINES, screen_height // 3, int(lines_per_s * RESERVE_S))


class ProvenanceText(Widget):
    """The reply's tokens as styled, wrapped lines (see the module docstring). While
    streaming it keeps blank lines below the text (RESERVE_S), dropped when it finishes."""

    DEFAULT_CSS = "ProvenanceText { height: auto; }"

    def __init__(self, clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens: list[Token] = []
        self._content: Content | None = None  # all of it (render(): selections, copies)
        self._width = 0  # the width the lines below were wrapped at
        self._done = 0  # tokens[:_done] are ended paragraphs, wrapped into _done_lines
        self._done_lines: list[Strip] = []
        self._done_breaks = 0  # newlines in tokens[:_done]: where the growing paragraph starts
        self._lines: list[Strip] | None = None  # _done_lines + the growing paragraph's
        # (the growing paragraph's first token, its lines but the last two, where those
        # two start: character ``at``, (column, line) = (x, y) in the paragraph)
        self._settled: tuple[int, list[Strip], int, int, int] = (-1, [], 0, 0, 0)
        self._selected: tuple[tuple, list[Strip]] | None = None  # the lines with a selection shown
        self._clock = clock
        self._reserved = 0  # lines laid out for the text, while streaming
        self._started_at: float | None = None  # when the first tokens came
        self._wrapped = (0, 0)  # (content width, lines) of the text at the last append
        self.lines_per_s: float | None = None  # how fast its lines came, once finished

    def append(self, tokens: list[Token]) -> None:
        self.tokens.extend(tokens)
        self._content = self._lines = None
        if self._started_at is None:
            self._started_at = self._clock()
        if not self.display:  # the Markdown view is showing: laid out when shown again
            return
        width, height = self.content_size
        if not width:  # not laid out yet
            self.refresh(layout=True)
            return
        (shown_width, shown), needed = self._wrapped, self.text_height(width)
        self._wrapped = (width, needed)
        if needed > height or shown_width not in (0, width):  # more lines, or resized since
            elapsed = self._clock() - self._started_at
            rate = needed / elapsed if elapsed > 0 else 0.0
            self._reserved = lines_to_reserve(needed, rate, self.screen.size.height)
            self.refresh(layout=True)
        else:
            # only the lines from the old last one (its last word may wrap on) are new:
            # the screen recomposes those, not the whole reply
            first = max(0, shown - 1)
            self.refresh(Region(0, first, width, needed - first))

    def make_room(self, lines: int) -> None:
        """Lays the (still empty) reply out with ``lines`` blank lines, so its first tokens
        fit without another layout."""
        self._reserved = lines

    def finish(self) -> None:
        """The reply is complete: its height becomes the text's."""
        if self._started_at is not None and self._wrapped[1]:
            elapsed = self._clock() - self._started_at
            self.lines_per_s = self._wrapped[1] / elapsed if elapsed > 0.5 else None
        if self._reserved:
            self._reserved = 0
            self.refresh(layout=True)

    def text_height(self, width: int) -> int:
        """Lines the text wraps to at this content width."""
        if width == self.size.width and self.text_selection is None:
            return len(self.wrapped_lines())
        return self.render().get_height(self.styles, width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(self.text_height(width), self._reserved)

    def render(self) -> Content:
        if self._content is None:
            self._content = provenance_content(self.tokens, styles=kind_styles(self.app))
        return self._content

    def render_line(self, y: int) -> Strip:
        lines = self.wrapped_lines()
        return lines[y] if y < len(lines) else Strip.blank(self.size.width, self.visual_style.rich_style)

    def wrapped_lines(self) -> list[Strip]:
        """The text's lines at the widget's width, wrapping only what changed."""
        width = self.size.width
        selection = self.text_selection
        if selection is not None:  # a selection's offsets span the whole text: drawn whole
            key = (selection, width, len(self.tokens))
            if self._selected is None or self._selected[0] != key:
                self._selected = (key, self._strips(self.render(), width))
            return self._selected[1]
        if width != self._width:
            self._forget(width)
        if self._lines is None:
            end = self._done
            for i in range(len(self.tokens) - 1, self._done - 1, -1):
                if self.tokens[i].text.endswith("\n"):
                    end = i + 1
                    break
            if end > self._done:  # whole paragraphs ended: wrap them once (less the newline
                # that ends them: the next paragraph's first line is where it leads)
                ended = provenance_content(self.tokens[self._done:end], styles=kind_styles(self.app))
                self._done_lines = self._done_lines + self._strips(ended[:-1], width, self._done_breaks)
                self._done, self._done_breaks = end, self._done_breaks + ended.plain.count("\n")
            self._lines = self._done_lines + self._growing_lines(width)
        return self._lines

    def _growing_lines(self, width: int) -> list[Strip]:
        """The growing paragraph's lines. Wrapping is greedy, so text added at the end
        changes only the last lines: the lines above the last two are kept
        (``_settled``), and the text from where those two start is wrapped again (two:
        a line that ends the text exactly at the width wraps its space to an empty one)."""
        growing = provenance_content(self.tokens[self._done:], styles=kind_styles(self.app))
        first, settled, at, x, y = self._settled
        if first != self._done or "\t" in growing.plain:  # a new paragraph; tabs: see _starts_a_word
            settled, at, x, y = [], 0, 0, 0
        tail = self._strips(growing[at:], width, self._done_breaks + y, x)
        lines = settled + tail
        start = _offset(tail[-2]) if len(tail) > 2 else None
        if start is not None:  # where the second-last line starts, in the paragraph
            x_kept, y_kept = start[0], start[1] - self._done_breaks  # (moved to the whole text's)
            text = growing.plain
            at_kept = sum(len(line) + 1 for line in text.split("\n")[:y_kept]) + x_kept
            if _starts_a_word(text, at_kept):
                self._settled = (self._done, lines[:-2], at_kept, x_kept, y_kept)
        return lines

    def _strips(self, content: Content, width: int, first_line: int = 0, first_column: int = 0) -> list[Strip]:
        """``content``'s lines; it starts at the whole text's ``first_line``, column
        ``first_column`` (its styles carry each character's (column, line) offset, which
        a mouse selection maps back to the whole text)."""
        strips = Visual.to_strips(self, content, width, None, self.visual_style)
        return [_moved(strip, first_line, first_column) for strip in strips] if first_line or first_column else strips

    def _forget(self, width: int = 0) -> None:
        self._width, self._done, self._done_lines, self._done_breaks, self._lines = width, 0, [], 0, None
        self._settled = (-1, [], 0, 0, 0)
        self._selected = None

    def notify_style_update(self) -> None:
        super().notify_style_update()  # a theme or style change: the lines are drawn anew
        self._forget()


def _starts_a_word(text: str, at: int) -> bool:
    """Whether wrapping may restart at ``at``: the wrapper cuts a line into chunks of a
    word and its spaces, so from a word's start (not inside a word or a run of spaces)
    the rest wraps as it does within the whole; tabs widen by their column, so not with
    tabs."""
    return (0 <= at < len(text) and not text[at].isspace() and (at == 0 or text[at - 1].isspace())
            and "\t" not in text)


def _offset(strip: Strip) -> tuple[int, int] | None:
    """The (column, line) offset of the strip's first character, if it has one."""
    for segment in strip:
        style = segment.style
        if style is not None and style.meta.get("offset") is not None:
            return style.meta["offset"]
    return None


def _moved(strip: Strip, lines: int, columns: int = 0) -> Strip:
    """The strip with its offset metadata moved ``lines`` lines down, and ``columns``
    right on its first line (the text it was wrapped from started mid-line)."""
    segments = []
    for segment in strip:
        style = segment.style
        offset = style.meta.get("offset") if style is not None else None
        if offset is not None:
            x, y = offset
            style = style + RichStyle.from_meta({"offset": (x + columns if y == 0 else x, y + lines)})
        segments.append(Segment(segment.text, style, segment.control))
    return Strip(segments, strip.cell_length)
