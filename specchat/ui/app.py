"""The specchat Textual app: owns the backend, the settings and the workers, and wires the
widgets and screens. Models load in a thread worker through the ``loader`` the caller injects
(:mod:`specchat.live`'s, or :func:`specchat.ui.backend.replay_loader`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from specchat.errors import SpecchatError, one_line
from specchat.events import ErrorEvent, Loaded, LoadProgress, StepEvent, UserMessage
from specchat.sanitize import clean, clean_data, clean_line, decode_input
from specchat.ui.backend import BackendInfo, LoadedBackend, Loader
from specchat.ui.commands import REPLACED_SYSTEM_COMMANDS, profile_commands, system_commands
from specchat.ui.controls import Controls
from specchat.ui.figures import FigureFeed
from specchat.ui.pump import EventPump, EventsReady
from specchat.ui.quitting import Quitting, run_to_exit
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.session_controls import SessionControls
from specchat.ui.step_gate import StepGate
from specchat.ui.themes import SPEC_VARIABLE_DEFAULTS, load_themes, theme_dirs
from specchat.ui.widgets.chat_input import ChatInput

DEFAULT_THEME = "specchat-dark"
# workers' events reach the screen at most this often (see SpecchatApp._drain): each
# drain costs ~2-3 ms of the UI thread (apply, wrap, paint), time the model waits on a
# small CPU (the UI draws between its steps: step_gate.py); six a second still reads
# as streaming text
DRAIN_INTERVAL_S = 1 / 6


# Markers the workers put between the chat events (never shown, never recorded).
@dataclass(frozen=True)
class _LoadDone:
    ref: str | None
    loaded: LoadedBackend | None
    error: str | None = None
    adopt: Loader | None = None  # becomes the app's loader once this load succeeds


@dataclass(frozen=True)
class _TurnEnded:
    text: str
    delivered: bool


class SpecchatApp(Controls, SessionControls, Quitting, App):
    CSS_PATH = "specchat.tcss"
    TITLE = "specchat"
    # Priority so the focused TextArea's own F6/F7 (select line/all) and Ctrl+Y do not
    # shadow them; Esc is not, so modal screens and the palette still close with it.
    BINDINGS = [
        Binding("f1", "help", "Keys", priority=True),
        Binding("f2", "toggle_panel", "Panel", priority=True),
        Binding("f3", "toggle_markdown", "Markdown", priority=True),
        Binding("f4", "inspect", "Inspect", priority=True),
        Binding("f5", "gamma(-1)", "γ−", priority=True),
        Binding("f6", "gamma(1)", "γ+", priority=True),
        # Not in the footer (it would overflow 140 columns); F1 and the palette list them.
        Binding("f7", "temperature(-0.1)", "T−", priority=True, show=False),
        Binding("f8", "temperature(0.1)", "T+", priority=True, show=False),
        Binding("f9", "toggle_thinking", "Think", priority=True),
        Binding("ctrl+n", "new_chat", "New chat", priority=True),
        Binding("ctrl+o", "copy_reply", "Copy", priority=True),
        Binding("ctrl+r", "history", "Sessions", priority=True),
        Binding("ctrl+f", "search", "Search", priority=True),
        Binding("ctrl+s", "screenshot", "Screenshot", priority=True, show=False),  # F1 and the palette list it
        Binding("escape", "cancel", "Cancel", show=False),  # the status line says "Esc cancels" while answering
    ]

    def __init__(
        self,
        profile_ref: str | None = None,
        *,
        loader: Loader | None = None,
        reopen: Callable[[Path], Loader] | None = None,
        theme: str | None = None,
        themes_from: Iterable[Path] | None = None,
        deterministic: bool = False,
        hide_timing: bool | None = None,
    ) -> None:
        """``loader`` loads a profile (or a recording) in a worker thread; ``reopen``
        turns a recording path into a loader that carries on its conversation (the
        history screen's "reopen"; None: only replays can be opened there)."""
        super().__init__()
        self.profile_ref = profile_ref
        self.loader: Loader = loader or _no_loader
        self.reopen = reopen
        self.requested_theme = theme
        self.themes_from = list(themes_from) if themes_from is not None else None
        self.pump = EventPump(self)
        self.gate = StepGate()  # the UI draws between the model's steps (see step_gate.py)
        self.loaded: LoadedBackend | None = None
        self.loading: str | None = None
        self._generating = False
        self.theme_failures: list[str] = []
        self.max_lag_s = 0.0  # worst delay between a worker's put and the UI applying it
        self.loaded_at = 0.0  # perf_counter when the backend was installed
        self.last_put_at = 0.0  # perf_counter when the latest drained event was produced
        self.events_applied = 0
        self._drained_at = 0.0  # perf_counter of the last drain (see _drain)
        self._drain_scheduled = False
        self.turns_ended = 0  # turns (or replays) whose worker has finished
        self.turn_ended_at = 0.0  # perf_counter when the last of them was applied
        self._reset_after_turn = False
        self._pending: LoadedBackend | None = None
        self.init_quitting()
        # Deterministic mode (snapshots): no cursor blink, and wall-clock figures hidden
        # unless the caller's events carry fixed timings (hide_timing=False).
        hidden = deterministic if hide_timing is None else hide_timing
        self.chat = ChatScreen(hide_timing=hidden, cursor_blink=not deterministic)

    # --- setup --------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        return self.chat

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Textual's built-in themes know nothing of provenance colours.
        return dict(SPEC_VARIABLE_DEFAULTS)

    def on_mount(self) -> None:
        loaded, failed = load_themes(self.themes_from if self.themes_from is not None else theme_dirs())
        for theme in loaded:
            self.register_theme(theme)
        for failure in failed:
            self.theme_failures.append(clean_line(failure))
            self.notify(f"theme skipped — {clean_line(failure)}", severity="warning", timeout=8, markup=False)
        self.switch_theme(self.requested_theme or DEFAULT_THEME)
        if not self.is_headless:  # a real terminal (tests drive headless apps, and own the signals)
            self.quit_on_signals()

    def on_unmount(self) -> None:
        for loaded in (self.loaded, self._pending):
            if loaded is not None:
                loaded.close()  # the recording is synced and closed on the way out

    @on(ChatScreen.Ready)
    def _start(self) -> None:
        self.switch_profile(self.profile_ref)

    def switch_theme(self, name: str) -> bool:
        if name not in self.available_themes:
            self.notify(f"unknown theme '{name}' — keeping {self.theme}", severity="warning")
            return False
        self.theme = name
        return True

    @property
    def info(self) -> BackendInfo | None:
        return self.loaded.info if self.loaded else None

    # --- loading ------------------------------------------------------------------
    def switch_profile(self, ref: str | None, *, loader: Loader | None = None, label: str | None = None,
                       adopt: bool = False) -> None:
        """Loads ``ref`` in the background (with ``loader`` instead of the app's own,
        e.g. a replay); the current chat stays usable until the new one is ready."""
        if self.loading is not None:
            self.notify(f"already loading {self.loading}", severity="warning", markup=False)
            return
        self.loading = clean_line(label or ref or "default")
        self.sub_title = f"loading {self.loading}…" if self.loaded is None else self.sub_title
        self.chat.status.set_text(f"loading {self.loading}…")
        self._load_idle.clear()
        self._load_worker(ref, loader, adopt)

    def pick_profile(self) -> None:
        self.search_commands(profile_commands(self), "profile…")

    @work(thread=True, exclusive=True, group="load")
    def _load_worker(self, ref: str | None, loader: Loader | None, adopt: bool) -> None:
        try:
            loaded = (loader or self.loader)(ref, self.pump.put)
        except Exception as exc:  # every failure becomes one line in the app
            self.pump.put_marker(_LoadDone(ref, None, one_line(exc)))
        else:
            self.pump.put_marker(_LoadDone(ref, loaded, adopt=loader if adopt else None))
        finally:
            self._load_idle.set()

    def _finish_load(self, done: _LoadDone) -> None:
        what, self.loading = self.loading or done.ref or "default", None
        self.chat.status.hide_progress()
        if done.loaded is None:
            keeping = f" — still using {self.info.profile_name}" if self.info else ""
            self.chat.transcript.add_note(f"could not load {what}: {done.error}{keeping}", "error")
            self.notify(done.error or "load failed", title="profile not loaded", severity="error", timeout=10,
                        markup=False)
            self._update_status()
            return
        if done.adopt is not None:
            self.loader = done.adopt
        if self.generating:  # the old model finishes its reply first
            self._pending = done.loaded
            self.loaded.backend.cancel()  # type: ignore[union-attr]
            return
        self._install(done.loaded)

    def _install(self, loaded: LoadedBackend) -> None:
        previous, self.loaded = self.loaded, loaded
        self.gate = StepGate()  # another model: its steps' lengths are learnt anew
        self.loaded_at = time.perf_counter()
        if previous is not None:
            previous.close()
        # Names and descriptions may come from a recording: inert before they are shown.
        info = loaded.info = clean_data(loaded.info)
        self.sub_title = info.profile_name + (f" · {info.target_dtype}" if info.target_dtype else "")
        if loaded.earlier:  # a reopened chat: what was said, as recorded, then it goes on
            self.chat.transcript.add_note("— a reopened chat, as recorded —")  # apart from a chat shown before
            self.chat.apply_events([clean_data(event) for event in loaded.earlier])
            self.chat.turn_ended()  # a reply cut short by a crash keeps its text, no box left open
            turns = sum(isinstance(event, UserMessage) for event in loaded.earlier)
            self.chat.transcript.add_note(f"— reopened: {turns} earlier turn{'' if turns == 1 else 's'} above —")
        self.chat.reset_figures(info.max_gamma, info.method, gamma=info.num_speculative_tokens)
        self.chat.fresh_model = loaded.can_send  # a replay reads nothing
        self.chat.apply_events([Loaded(info.profile_name, info.description)])
        note = (info.details or {}).get("speculation_source")
        self.chat.query_one("#legend").set_note(note if isinstance(note, str) else "")  # type: ignore[attr-defined]
        if (info.details or {}).get("precision"):  # which dtype, and why (e.g. native bf16 on this CPU)
            self.chat.transcript.add_note(f"precision: {info.details['precision']}")
        if info.warning:
            self.chat.transcript.add_note(info.warning, "warning")
            self.notify(info.warning, severity="warning", timeout=10, markup=False)
        if loaded.pending and not self.chat.input.text:
            self.chat.input.text = clean(loaded.pending)  # the prompt that never got its reply (a recording's: inert)
        if not loaded.can_send:  # a replay plays by itself
            self.generating = True
            self._engine_idle.clear()
            self._run_turn(loaded.backend, None)
        self._update_status()  # after the replay started: it said "ready" while one played

    @property
    def generating(self) -> bool:
        """Whether a turn (or a replay) is running."""
        return self._generating

    @generating.setter
    def generating(self, on: bool) -> None:
        self._generating = on
        if self.chat.is_mounted:  # no blinking while the model writes: a blink repaints the screen on its CPU
            self.chat.input.cursor_blink = self.chat.cursor_blink and not on

    # --- turns --------------------------------------------------------------------
    @on(ChatInput.Submitted)
    def _submitted(self, message: ChatInput.Submitted) -> None:
        if self.loaded is None:
            what = f"{self.loading} is still loading" if self.loading else "no profile is loaded (Ctrl+P: Switch profile)"
            self.notify(f"{what} — your message stays in the box", severity="warning", markup=False)
            return
        if not self.loaded.can_send:
            self.notify("this is a replay — nothing to send", severity="warning")
            return
        if self.generating:
            self.notify("still answering — Esc cancels", severity="warning")
            return
        text = decode_input(self.chat.input.take())  # a terminal's undecodable bytes: U+FFFD, once
        self.generating = True
        self._update_status()
        self._engine_idle.clear()
        self._run_turn(self.loaded.backend, text, gated=self.loaded.info.computes_on_cpu)

    @work(thread=True, exclusive=True, group="engine")
    def _run_turn(self, backend: Any, text: str | None, gated: bool = False) -> None:
        """A turn, ``text`` sent to a live backend, or (``text`` None) a source playing by itself.
        ``gated``: the model shares the CPU with the UI, which then draws between its steps (step_gate.py)."""
        delivered = text is None
        feed = FigureFeed(backend)
        try:
            events = backend.events() if text is None else backend.send(text)
            # the gate times the events that each cost a model step
            for event in self.gate.steps(events, lambda e: isinstance(e, StepEvent)) if gated else events:
                delivered = delivered or isinstance(event, UserMessage)
                self.pump.hand_over(event, feed)
        except Exception as exc:
            self.pump.put(ErrorEvent(f"{'replay stopped' if text is None else 'generation failed'}: {one_line(exc)}"))
        finally:
            self.pump.put_marker(_TurnEnded(text or "", delivered))
            self._engine_idle.set()

    def _turn_ended(self, ended: _TurnEnded) -> None:
        self.generating = False
        self.chat.turn_ended()
        self.turns_ended += 1
        self.turn_ended_at = time.perf_counter()
        box = self.chat.input
        if not ended.delivered and ended.text and not box.text:
            box.text = ended.text  # nothing the user typed is lost
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._install(pending)
        if self._reset_after_turn:
            self._reset_after_turn = False
            self.action_new_chat()
        self._update_status()

    @on(EventsReady)
    def _drain(self) -> None:
        """Applies what the workers put, at most every DRAIN_INTERVAL_S: the UI shares the
        CPU with the model (llama.cpp keeps every core busy), and a relayout per token
        would cost more than the tokens. Events wait in the pump meanwhile; one timer
        brings them in, and no event is dropped or reordered. The batch is applied
        between two of the model's steps (see step_gate.py)."""
        if not self.chat.can_show:  # events wait in the pump (see ChatScreen.can_show)
            return
        now = time.perf_counter()
        wait = self._drained_at + DRAIN_INTERVAL_S - now
        if wait > 0 and not self.pump.urgent:  # a turn's or a load's end is shown at once
            if not self._drain_scheduled:
                self._drain_scheduled = True
                self.set_timer(wait, self._scheduled_drain)
            return
        self._drained_at = now
        with self.gate.drawing():
            self._apply_drained(now)

    def _apply_drained(self, now: float) -> None:
        batch: list[Any] = []
        for put_at, event in self.pump.drain():
            self.max_lag_s = max(self.max_lag_s, now - put_at)
            self.last_put_at = put_at
            if isinstance(event, LoadProgress):
                self.chat.status.show_progress(event, self.loading or "profile")
            elif isinstance(event, (_LoadDone, _TurnEnded)):
                self.chat.apply_events(batch)
                self.events_applied += len(batch)
                batch = []
                self._finish_load(event) if isinstance(event, _LoadDone) else self._turn_ended(event)
            else:
                batch.append(event)
        self.chat.apply_events(batch)
        self.events_applied += len(batch)

    def _scheduled_drain(self) -> None:
        self._drain_scheduled = False
        self._drain()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from (c for c in super().get_system_commands(screen) if c.title not in REPLACED_SYSTEM_COMMANDS)
        yield from system_commands(self)


def _no_loader(ref: str | None, progress: Any) -> LoadedBackend:
    raise SpecchatError("this app was started without a model loader", hint="start it with `specchat`")


def run_app(profile_ref: str | None = None, **options: Any) -> int:
    """Entry point for the CLI: ``specchat`` (and ``specchat replay`` / ``demo`` with
    their loaders). Returns the process exit code: 0, or 128 + the signal that quit it
    (see :mod:`specchat.ui.quitting`)."""
    app = SpecchatApp(profile_ref, **options)
    run_to_exit(app)
    return app.return_code or 0
