"""What a streaming reply costs the screen (specchat/ui/widgets/reply.py, panel.py).

On two cores the UI's drawing is taken from the model's threads, and a layout of the
screen (re-arrange and repaint everything) costs ~10-20 ms. So a reply that grows keeps
room for about four seconds of text instead of asking for a layout per new line, repaints
only its last lines, and the panel does not relayout when a figure gets shorter. What
is on screen must still be exactly the reply's text at every step.
"""

from __future__ import annotations

import asyncio
import random

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Collapsible, Static

from specchat.events import Token
from specchat.ui.themes import SPEC_VARIABLE_DEFAULTS
from specchat.ui.widgets.panel import SpecPanel
from specchat.ui.widgets.provenance_text import MAX_RESERVED_LINES
from specchat.ui.widgets.reply import ReplyView

KINDS = ("accepted", "target", "bonus", "resampled")


def split_tokens(text: str, seed: int) -> list[Token]:
    """The text cut at random places, so words grow across batches (a word on a reply's
    last line can then wrap onto the next one)."""
    rng = random.Random(seed)
    tokens, at = [], 0
    while at < len(text):
        size = rng.randint(1, 6)
        tokens.append(Token(id=len(tokens), text=text[at:at + size], kind=rng.choice(KINDS)))
        at += size
    return tokens


def reply_text(seed: int, words: int = 320) -> str:
    rng = random.Random(seed)
    parts = []
    for i in range(words):
        parts.append("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 11))))
        if i % 90 == 89:
            parts.append("\n\n")
    return " ".join(parts)


class ReplyApp(App):
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(SPEC_VARIABLE_DEFAULTS)  # the provenance colours, as the app has them

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield ReplyView(1)


def screen_lines(app: App, widget) -> list[str]:
    strips = app.screen._compositor.render_strips()
    region = widget.content_region
    return [strips[y].text[region.x:region.right].rstrip() for y in range(region.y, region.bottom)]


def counting_layouts(widget) -> list[int]:
    layouts = [0]
    refresh = widget.refresh

    def counted(*regions, layout=False, **kwargs):
        layouts[0] += layout
        return refresh(*regions, layout=layout, **kwargs)

    widget.refresh = counted
    return layouts


def test_a_streaming_reply_shows_exactly_its_text_with_a_layout_per_several_lines():
    text = reply_text(seed=4)
    tokens = split_tokens(text, seed=5)
    now = [0.0]

    async def run():
        app = ReplyApp()
        async with app.run_test(size=(64, 60)) as pilot:
            view = app.query_one(ReplyView)
            provenance = view.provenance
            provenance._clock = lambda: now[0]
            layouts = counting_layouts(provenance)
            for start in range(0, len(tokens), 12):  # 12 tokens a drain, 8 drains a second
                if start == 12 * 20:  # the terminal widens: the text wraps to fewer lines
                    await pilot.resize_terminal(90, 60)
                now[0] += 0.125
                view.append_tokens(tokens[start:start + 12])
                await pilot.pause()
                shown_text = "".join(t.text for t in tokens[:start + 12])
                expected = [line.plain.rstrip() for line in Content(shown_text).wrap(provenance.content_size.width)]
                lines = screen_lines(app, provenance)
                assert lines[:len(expected)] == expected  # every line right, the last included
                assert not any(lines[len(expected):])  # below it only the blank lines kept in reserve
                assert len(lines) - len(expected) <= MAX_RESERVED_LINES
            text_lines = len(expected)
            assert text_lines >= 30
            # a layout per new line would be ~text_lines; four seconds of room is MAX_RESERVED_LINES (16) here
            assert layouts[0] <= text_lines / 4, f"{layouts[0]} layouts for {text_lines} lines"
            view.finish("stop")
            await pilot.pause()
            assert provenance.size.height == text_lines  # the reserve is gone once it finishes
            assert screen_lines(app, provenance) == expected

    asyncio.run(run())


def test_a_fast_reply_on_a_small_terminal_keeps_at_most_a_third_of_the_screen_blank():
    """Room for four seconds of a fast reply would be most of a 24-line terminal: once the
    reply scrolls up, the screen would be mostly blank lines."""
    tokens = split_tokens(reply_text(seed=9), seed=10)
    now = [0.0]

    async def run():
        app = ReplyApp()
        async with app.run_test(size=(64, 24)) as pilot:
            view = app.query_one(ReplyView)
            provenance = view.provenance
            provenance._clock = lambda: now[0]
            most = 0
            for start in range(0, len(tokens), 12):
                now[0] += 0.125
                view.append_tokens(tokens[start:start + 12])
                await pilot.pause()
                most = max(most, provenance.size.height - provenance.text_height(provenance.content_size.width))
            assert 0 < most <= 24 // 3

    asyncio.run(run())


def test_a_slow_reply_keeps_no_blank_lines():
    """At a few tokens a second, four seconds of room is under a line: nothing is reserved."""
    tokens = split_tokens(reply_text(seed=6, words=30), seed=7)
    now = [0.0]

    async def run():
        app = ReplyApp()
        async with app.run_test(size=(64, 60)) as pilot:
            view = app.query_one(ReplyView)
            view.provenance._clock = lambda: now[0]
            for token in tokens:
                now[0] += 1.0
                view.append_tokens([token])
                await pilot.pause()
                assert view.provenance.size.height == view.provenance.text_height(view.provenance.content_size.width)

    asyncio.run(run())


class PanelApp(App):
    """The panel with its details unfolded (the histograms live there)."""

    def compose(self) -> ComposeResult:
        yield SpecPanel(hide_timing=True)

    def on_mount(self) -> None:
        self.query_one("#details", Collapsible).collapsed = False


def test_a_panel_figure_that_gets_shorter_keeps_its_height_until_the_panel_settles():
    async def run():
        app = PanelApp()
        async with app.run_test(size=(60, 50)) as pilot:
            panel = app.query_one(SpecPanel)
            static = panel.query_one("#histogram", Static)
            layouts = counting_layouts(static)
            panel._update("#histogram", Content("a\nb\nc"))
            await pilot.pause()
            assert static.size.height == 3  # taller: a layout
            grown = layouts[0]
            panel._update("#histogram", Content("d"))
            await pilot.pause()
            assert static.size.height == 3 and layouts[0] == grown  # shorter: no layout, blank lines
            assert str(static.render()).split("\n")[0] == "d"
            panel._update("#histogram", Content("e\nf"))
            await pilot.pause()
            assert static.size.height == 3 and layouts[0] == grown
            panel._update("#histogram", Content("e\nf"), settle=True)
            await pilot.pause()
            assert static.size.height == 2 and layouts[0] > grown  # settled: its own height again

    asyncio.run(run())


def test_the_panels_histograms_are_laid_out_at_their_largest_from_the_start():
    """A profile drafting up to γ = 4 has at most 5 histogram rows and 4 positions: the
    panel gives them that room when the profile loads, so a first turn whose γ grows
    step by step (γ = auto) does not relayout the screen at each new row."""
    from specchat.telemetry import MetricsSnapshot

    async def run():
        app = PanelApp()
        async with app.run_test(size=(60, 60)) as pilot:
            panel = app.query_one(SpecPanel)
            histogram, positions = panel.query_one("#histogram", Static), panel.query_one("#positions", Static)
            panel.size_for("ngram", 4)
            panel.show(MetricsSnapshot(), MetricsSnapshot(), settle=True)
            await pilot.pause()
            assert (histogram.size.height, positions.size.height) == (5, 4)
            assert str(histogram.render()).split("\n")[0] == "no drafting steps yet"
            verdicts = [panel.query_one(f"#{name}", Static) for name in ("verdict", "recommend", "controller")]
            assert [static.size.height for static in verdicts] == [4, 2, 2]  # the verdict in words, up to four lines
            layouts = counting_layouts(histogram), counting_layouts(positions)
            for gamma in range(1, 5):
                turn = MetricsSnapshot(num_steps=gamma, acceptance_histogram=(1,) * (gamma + 1),
                                       per_position_acceptance=(0.5,) * gamma, gamma_history=tuple(range(1, gamma + 1)))
                panel.show(turn, turn)
                await pilot.pause()
                assert str(histogram.render()).count("█") > 0
                assert (histogram.size.height, positions.size.height) == (5, 4)
            assert [count[0] for count in layouts] == [0, 0]
            panel.size_for("ngram", 10**6)  # a crafted recording's: at most a profile's largest γ
            panel.show(MetricsSnapshot(), MetricsSnapshot(), settle=True)
            await pilot.pause()
            assert (histogram.size.height, positions.size.height) == (17, 16)
            panel.size_for("none", 4)  # a profile without drafts: no room kept
            panel.show(MetricsSnapshot(), MetricsSnapshot(), settle=True)
            await pilot.pause()
            assert (histogram.size.height, positions.size.height) == (1, 1)

    asyncio.run(run())


def test_the_input_cursor_does_not_blink_while_the_model_writes(tmp_path):
    """Each blink repaints the screen, twice a second, on the CPU the model shares."""
    from specchat.ui.app import SpecchatApp
    from specchat.ui.backend import replay_loader
    from tests.support.ui_session import turn_events, write_recording

    path = write_recording(tmp_path / "short.jsonl", [turn_events(1, "hi", n_tokens=5, seed=2)])

    async def run():
        app = SpecchatApp(None, loader=replay_loader(path, "max"))
        async with app.run_test(size=(120, 40)) as pilot:
            while app.turns_ended < 1:
                await pilot.pause(0.01)
            box = app.chat.input
            assert box.cursor_blink and not app.generating  # the replay's turn is over
            app.generating = True
            assert not box.cursor_blink
            app.generating = False
            assert box.cursor_blink

    asyncio.run(run())


def paragraph_tokens(seed: int) -> list[Token]:
    """Prose in paragraphs, with newlines as tokens of their own, ending a token and
    inside one (only a token that ends in a newline ends a paragraph for the widget)."""
    rng = random.Random(seed)
    tokens: list[Token] = []
    for paragraph in range(9):
        tokens += split_tokens(reply_text(seed + paragraph, words=rng.randint(3, 40)).replace("\n", ""), seed + 50)
        tokens.append(Token(id=0, kind=rng.choice(KINDS), text=rng.choice(["\n", "\n\n", ".\n", "\n\nThe", " a\nb"])))
    return [Token(id=i, kind=t.kind, text=t.text) for i, t in enumerate(tokens)]


def lines_of(strips) -> list[tuple]:
    return [tuple((segment.text, segment.style) for segment in strip) for strip in strips]


def test_lines_wrapped_paragraph_by_paragraph_equal_the_whole_texts_wrap():
    """Ended paragraphs are wrapped once and kept; the lines must be exactly what wrapping
    the whole text gives, styles included — after each batch, after a resize and after
    a theme change."""
    from textual.geometry import Offset
    from textual.selection import Selection
    from textual.visual import Visual

    from specchat.ui.widgets.provenance_text import provenance_content

    tokens = paragraph_tokens(seed=8)

    async def run():
        app = ReplyApp()
        async with app.run_test(size=(50, 120)) as pilot:
            view = app.query_one(ReplyView)
            provenance = view.provenance

            def check(offsets: bool = True):
                whole = Visual.to_strips(provenance, provenance_content(provenance.tokens), provenance.size.width,
                                         None, provenance.visual_style)
                lines = provenance.wrapped_lines()
                assert lines_of(lines) == lines_of(whole)
                # each character's (column, line) offset, which a mouse selection maps back
                # to the text, points at that character of the whole text
                source = "".join(t.text for t in provenance.tokens).split("\n")
                for strip in lines if offsets else ():
                    for segment in strip:
                        if segment.style is not None and segment.style.meta.get("offset"):
                            x, y = segment.style.meta["offset"]
                            assert source[y][x:x + len(segment.text)] == segment.text

            for start in range(0, len(tokens), 5):
                view.append_tokens(tokens[start:start + 5])
                await pilot.pause()
                check(offsets=start % 40 == 0)
            assert provenance._done > 0  # ended paragraphs were kept, not re-wrapped
            await pilot.resize_terminal(73, 120)
            await pilot.pause()
            check()
            app.theme = "textual-light"
            await pilot.pause()
            check()
            # a selection: drawn from the whole text, and its text is the whole text's
            selection = Selection(Offset(2, 1), Offset(4, 3))
            app.screen.selections = {provenance: selection}
            await pilot.pause()
            check()
            source = "".join(t.text for t in provenance.tokens).split("\n")
            assert provenance.get_selection(selection)[0] == "\n".join([source[1][2:], source[2], source[3][:4]])
            app.screen.selections = {provenance: Selection(Offset(0, 0), Offset(3, 0))}  # another one
            await pilot.pause()
            check()

    asyncio.run(run())


SPACES_AND_LONG_WORDS = ["x" * 45, "   ", " ", "  a", "b  ", "中文字 "]
TABS_AND_WIDE = SPACES_AND_LONG_WORDS + ["\t", "a\tb", " 漢字漢字漢字", "\n"]


def test_the_growing_paragraphs_kept_lines_equal_the_whole_wrap_with_awkward_text():
    """A drain re-wraps the growing paragraph only from its second-last line (greedy
    wrapping keeps the lines above). Runs of spaces that wrap (a line may start inside
    one), words longer than the line (folded), tabs (their width depends on the column)
    and wide characters must still give exactly the whole text's lines, offsets
    included, after every batch."""
    from textual.visual import Visual

    from specchat.ui.widgets.provenance_text import provenance_content

    async def run(awkward: list[str], seed: int, width: int):
        rng = random.Random(seed)
        tokens = []
        for token in paragraph_tokens(seed):
            tokens.append(token)
            if rng.random() < 0.2:
                tokens.append(Token(id=0, kind="target", text=rng.choice(awkward)))
        tokens = [Token(id=i, kind=t.kind, text=t.text) for i, t in enumerate(tokens)]
        app = ReplyApp()
        async with app.run_test(size=(width, 200)) as pilot:
            view = app.query_one(ReplyView)
            provenance = view.provenance
            view.append_tokens(tokens[:3])
            await pilot.pause()  # laid out once: the width holds from here
            for start in range(3, len(tokens), 3):
                view.append_tokens(tokens[start:start + 3])
                whole = Visual.to_strips(provenance, provenance_content(provenance.tokens), provenance.size.width,
                                         None, provenance.visual_style)
                assert lines_of(provenance.wrapped_lines()) == lines_of(whole), f"seed {seed}, after {start + 3} tokens"

    for awkward, seed, width in [(SPACES_AND_LONG_WORDS, 6, 20), (SPACES_AND_LONG_WORDS, 5, 37),
                                 (TABS_AND_WIDE, 4, 20), (TABS_AND_WIDE, 5, 37), (TABS_AND_WIDE, 8, 64)]:
        asyncio.run(run(awkward, seed, width))


def test_the_replys_box_goes_up_with_the_message_and_its_first_tokens_need_no_layout(tmp_path):
    """Each layout is a full one, taken from the model's cores: the reply's box is mounted
    with the user's message (one layout for both, not a second when the first tokens come),
    opens with room for a drain's worth of text, or for four seconds at the last reply's
    pace, and a note of the turn goes above it."""
    from tests.support.pilot import replayed, write_recording
    from specchat.events import Step, StepEvent, StepStats, TurnFinished, TurnStarted, UserMessage
    from specchat.ui.widgets.reply import NoteView, UserView

    path = write_recording(tmp_path / "one.jsonl", (UserMessage(1, "hi"), TurnStarted(1, 5, 3),
                                                    TurnFinished(1, "stop", "", {}, 0.1)))

    def step(texts):
        tokens = tuple(Token(id=i, text=t, kind="target") for i, t in enumerate(texts))
        return StepEvent(2, Step(tokens, StepStats(0, 0, 0), None), 0.1)

    async def run():
        async with replayed(path) as (app, pilot):
            chat = app.chat
            chat.apply_events([UserMessage(2, "and again")])
            await pilot.pause()
            reply = chat.transcript.last_reply
            assert reply is not None and reply.turn == 2 and reply.region.height > 0  # before the turn started
            layouts = counting_layouts(reply.provenance)
            now = [10.0]
            reply.provenance._clock = lambda: now[0]
            width = reply.provenance.content_size.width
            first = ["word "] * (width // 5 + 3)  # a drain's worth: onto a second line
            chat.apply_events([TurnStarted(2, 9, "auto", "speculation is off"), step(first)])
            await pilot.pause()
            assert reply.provenance.text_height(width) == 2
            assert layouts[0] == 0, "the first tokens asked for a layout"
            assert chat.transcript.last_reply is reply
            views = list(chat.transcript.children)
            note = next(v for v in views if isinstance(v, NoteView) and "speculation is off" in str(v.render()))
            user = [v for v in views if isinstance(v, UserView)][-1]
            assert views.index(user) < views.index(note) < views.index(reply)
            assert screen_lines(app, reply.provenance)[:2] == [line.plain.rstrip() for line in
                                                              Content("".join(first)).wrap(width)]
            # two lines in two seconds: the next reply opens with four seconds' worth, 4 lines
            now[0] += 2.0
            chat.apply_events([TurnFinished(2, "stop", "".join(first), {}, 2.0), UserMessage(3, "more")])
            await pilot.pause()
            assert chat.transcript.last_reply.turn == 3
            assert chat.transcript.last_reply.provenance.size.height == 4

    asyncio.run(run())


def test_a_reply_box_whose_turn_never_finishes_goes_and_notes_before_its_first_token_sit_above_it(tmp_path):
    """The early box must not outlive a turn that never began (a recording cut after the
    message, a backend that failed before the turn) or keep its blank room; and what is
    said before the reply's first token reads above the reply, as before the box went up
    early."""
    from tests.support.pilot import replayed, write_recording
    from specchat.events import ErrorEvent, TurnFinished, TurnStarted, UserMessage
    from specchat.ui.widgets.reply import NoteView, UserView

    path = write_recording(tmp_path / "cut.jsonl", (
        UserMessage(1, "first"), TurnStarted(1, 5, 3), ErrorEvent("generation failed: boom", 1),
        TurnFinished(1, "error", "", {}, 0.1), UserMessage(2, "cut short")), killed=True)

    async def run():
        async with replayed(path) as (app, pilot):
            await pilot.pause(0.05)
            views = [v for v in app.chat.transcript.children if isinstance(v, (UserView, ReplyView, NoteView))]
            return [(type(v).__name__, getattr(v, "turn", None), getattr(v, "finish_reason", None),
                     str(v.render()) if isinstance(v, NoteView) else "") for v in views]

    views = asyncio.run(run())
    replies = [v for v in views if v[0] == "ReplyView"]
    assert replies == [("ReplyView", 1, "error", "")], views  # no box left for turn 2
    kinds = [v[0] for v in views]
    error = next(i for i, v in enumerate(views) if "boom" in v[3])
    assert kinds.index("UserView") < error < kinds.index("ReplyView"), views
