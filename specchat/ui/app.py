"""The specchat Textual app: owns the backend, the settings and the workers.

Widgets live in :mod:`specchat.ui.widgets`, screens in :mod:`specchat.ui.screens`;
this file wires them. Nothing here imports torch: models load inside a thread
worker through the ``loader`` (by default :func:`specchat.ui.backend.load_backend`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from specchat.events import ErrorEvent, Loaded, LoadProgress, UserMessage
from specchat.ui.backend import BackendInfo, EventSource, LoadedBackend, Loader, load_backend
from specchat.ui.commands import profile_commands, system_commands
from specchat.ui.pump import EventPump, EventsReady
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.help import HelpScreen
from specchat.ui.screens.inspector import InspectorScreen
from specchat.ui.themes import SPEC_VARIABLE_DEFAULTS, load_themes, theme_dirs
from specchat.ui.widgets.chat_input import ChatInput

DEFAULT_THEME = "specchat-dark"


def one_line(exc: BaseException) -> str:
    """A user-facing line for any exception: SpecchatError's own text, else type + message."""
    from specchat.errors import SpecchatError

    text = str(exc) if isinstance(exc, SpecchatError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


# Markers the workers put between the chat events (never shown, never recorded).
@dataclass(frozen=True)
class _LoadDone:
    ref: str | None
    loaded: LoadedBackend | None
    error: str | None = None


@dataclass(frozen=True)
class _TurnEnded:
    text: str
    delivered: bool


class SpecchatApp(App):
    CSS_PATH = "specchat.tcss"
    TITLE = "specchat"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("f1", "help", "Keys"),
        Binding("f2", "toggle_panel", "Panel"),
        Binding("f3", "toggle_markdown", "Markdown"),
        Binding("f4", "inspect", "Inspect"),
        Binding("f5", "gamma_down", "γ−", priority=True),
        Binding("f6", "gamma_up", "γ+", priority=True),
        Binding("f7", "temperature_down", "T−", priority=True),
        Binding("f8", "temperature_up", "T+", priority=True),
        Binding("f9", "toggle_thinking", "Think"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+o", "copy_reply", "Copy reply"),
    ]

    def __init__(
        self,
        profile_ref: str | None = None,
        *,
        loader: Loader | None = None,
        theme: str | None = None,
        themes_from: Iterable[Path] | None = None,
        deterministic: bool = False,
        record: bool = True,
    ) -> None:
        super().__init__()
        self.profile_ref = profile_ref
        self.loader: Loader = loader or (lambda ref, progress: load_backend(ref, progress, record=record))
        self.requested_theme = theme
        self.themes_from = list(themes_from) if themes_from is not None else None
        self.deterministic = deterministic
        self.pump = EventPump(self)
        self.loaded: LoadedBackend | None = None
        self.loading: str | None = None
        self.generating = False
        self.markdown = False
        self.theme_failures: list[str] = []
        self.max_lag_s = 0.0  # worst delay between a worker's put and the UI applying it
        self.events_applied = 0
        self.turns_ended = 0  # turns (or replays) whose worker has finished
        self._reset_after_turn = False
        self._pending: LoadedBackend | None = None
        self.chat = ChatScreen(hide_timing=deterministic, cursor_blink=not deterministic)

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
            self.theme_failures.append(str(failure))
            self.notify(f"theme skipped — {failure}", severity="warning", timeout=8)
        self.switch_theme(self.requested_theme or DEFAULT_THEME)

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
    def switch_profile(self, ref: str | None) -> None:
        if self.loading is not None:
            self.notify(f"already loading {self.loading}", severity="warning")
            return
        self.loading = ref or "default"
        self.sub_title = f"loading {self.loading}…" if self.loaded is None else self.sub_title
        self.chat.status.set_text(f"loading {self.loading}…")
        self._load(ref)

    def pick_profile(self) -> None:
        self.search_commands(profile_commands(self), "profile…")

    @work(thread=True, exclusive=True, group="load")
    def _load(self, ref: str | None) -> None:
        try:
            loaded = self.loader(ref, self.pump.put)
        except Exception as exc:  # every failure becomes one line in the app
            self.pump.put(_LoadDone(ref, None, one_line(exc)))
            return
        self.pump.put(_LoadDone(ref, loaded))

    def _finish_load(self, done: _LoadDone) -> None:
        self.loading = None
        self.chat.status.hide_progress()
        if done.loaded is None:
            keeping = f" — still using {self.info.profile_name}" if self.info else ""
            self.chat.transcript.add_note(f"could not load profile {done.ref or 'default'}: {done.error}{keeping}", "error")
            self.notify(done.error or "load failed", title="profile not loaded", severity="error", timeout=10)
            self._update_status()
            return
        if self.generating:  # the old model finishes its reply first
            self._pending = done.loaded
            self.loaded.backend.cancel()  # type: ignore[union-attr]
            return
        self._install(done.loaded)

    def _install(self, loaded: LoadedBackend) -> None:
        previous, self.loaded = self.loaded, loaded
        if previous is not None:
            previous.close()
        info = loaded.info
        self.sub_title = info.profile_name
        self.chat.reset_figures(info.max_gamma, info.method)
        self.chat.apply_events([Loaded(info.profile_name, info.description)])
        self._update_status()
        if isinstance(loaded.backend, EventSource) and not hasattr(loaded.backend, "send"):
            self.generating = True
            self._play(loaded.backend)

    # --- turns --------------------------------------------------------------------
    @on(ChatInput.Submitted)
    def _submitted(self, message: ChatInput.Submitted) -> None:
        if self.loaded is None:
            what = f"{self.loading} is still loading" if self.loading else "no profile is loaded (Ctrl+P: Switch profile)"
            self.notify(f"{what} — your message stays in the box", severity="warning")
            return
        if not hasattr(self.loaded.backend, "send"):
            self.notify("this is a replay — nothing to send", severity="warning")
            return
        if self.generating:
            self.notify("still answering — Esc cancels", severity="warning")
            return
        text = self.chat.input.take()
        self.generating = True
        self._update_status()
        self._run_turn(self.loaded.backend, text)

    @work(thread=True, exclusive=True, group="engine")
    def _run_turn(self, backend: Any, text: str) -> None:
        delivered = False
        try:
            for event in backend.send(text):
                delivered = delivered or isinstance(event, UserMessage)
                self.pump.put(event)
        except Exception as exc:
            self.pump.put(ErrorEvent(f"generation failed: {one_line(exc)}"))
        finally:
            self.pump.put(_TurnEnded(text, delivered))

    @work(thread=True, exclusive=True, group="engine")
    def _play(self, source: EventSource) -> None:
        try:
            for event in source.events():
                self.pump.put(event)
        except Exception as exc:
            self.pump.put(ErrorEvent(f"replay stopped: {one_line(exc)}"))
        finally:
            self.pump.put(_TurnEnded("", True))

    def _turn_ended(self, ended: _TurnEnded) -> None:
        self.generating = False
        self.turns_ended += 1
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
        now = time.perf_counter()
        batch: list[Any] = []
        for put_at, event in self.pump.drain():
            self.max_lag_s = max(self.max_lag_s, now - put_at)
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

    # --- controls -----------------------------------------------------------------
    def _update_status(self) -> None:
        info = self.info
        if info is None:
            return
        parts = [info.profile_name]
        if info.method != "none":
            parts.append(f"{info.method} γ {info.num_speculative_tokens}")
        parts.append(f"T {info.temperature:.1f}")
        if info.thinking is not None:
            parts.append(f"thinking {'on' if info.thinking else 'off'}")
        if self.loading:
            parts.append(f"loading {self.loading}…")
        parts.append("answering… Esc cancels" if self.generating else "ready")
        self.chat.status.set_text(" · ".join(parts))

    def action_cancel(self) -> None:
        if self.generating and self.loaded is not None:
            self.loaded.backend.cancel()
            self.chat.status.set_text("cancelling…")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(list(self.BINDINGS)))

    def action_toggle_panel(self) -> None:
        self.chat.panel.display = not self.chat.panel.display

    def action_toggle_markdown(self) -> None:
        self.markdown = not self.markdown
        self.chat.transcript.set_markdown(self.markdown)
        self.chat.query_one("#legend").set_view("markdown" if self.markdown else "provenance")  # type: ignore[attr-defined]

    def action_inspect(self) -> None:
        self.push_screen(InspectorScreen(self.chat.last_tokens))

    def action_new_chat(self) -> None:
        if self.generating:
            self._reset_after_turn = True
            self.action_cancel()
            return
        if self.loaded is not None and hasattr(self.loaded.backend, "reset"):
            self.loaded.backend.reset()
        self.chat.current = None
        self.call_later(self.chat.transcript.clear_chat)
        self.notify("new chat")

    def action_copy_reply(self) -> None:
        reply = self.chat.transcript.last_reply
        if reply is None:
            self.notify("no reply to copy yet", severity="warning")
            return
        self.copy_to_clipboard(reply.text)
        self.notify(f"copied the last reply ({len(reply.text)} characters)")

    def _live_backend(self) -> Any | None:
        if self.loaded is None or not hasattr(self.loaded.backend, "send"):
            self.notify("no live model to change", severity="warning")
            return None
        return self.loaded.backend

    def set_gamma(self, gamma: int | str) -> None:
        backend, info = self._live_backend(), self.info
        if backend is None or info is None:
            return
        if info.method == "none":
            self.notify("this profile does not speculate (method = none)", severity="warning")
            return
        backend.set_num_speculative_tokens(gamma)
        info.num_speculative_tokens = gamma
        self._update_status()

    def action_gamma(self, delta: int) -> None:
        info = self.info
        if info is None:
            return
        choices: list[int | str] = [*range(1, info.max_gamma + 1), "auto"]
        current = info.num_speculative_tokens
        index = choices.index(current) if current in choices else 0
        self.set_gamma(choices[max(0, min(len(choices) - 1, index + delta))])

    def action_gamma_down(self) -> None:
        self.action_gamma(-1)

    def action_gamma_up(self) -> None:
        self.action_gamma(1)

    def set_temperature(self, temperature: float) -> None:
        backend, info = self._live_backend(), self.info
        if backend is None or info is None:
            return
        info.temperature = round(max(0.0, min(2.0, temperature)), 2)
        backend.set_temperature(info.temperature)
        self._update_status()

    def action_temperature(self, delta: float) -> None:
        if self.info is not None:
            self.set_temperature(self.info.temperature + delta)

    def action_temperature_down(self) -> None:
        self.action_temperature(-0.1)

    def action_temperature_up(self) -> None:
        self.action_temperature(0.1)

    def action_toggle_thinking(self) -> None:
        backend, info = self._live_backend(), self.info
        if backend is None or info is None:
            return
        if info.thinking is None:
            self.notify("this model's chat template has no thinking switch", severity="warning")
            return
        info.thinking = not info.thinking
        backend.set_thinking(info.thinking)
        self._update_status()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from system_commands(self)


def run_app(profile_ref: str | None = None, **options: Any) -> int:
    """Entry point for the CLI: ``specchat chat`` (and ``specchat replay`` with a
    replay loader). Returns the process exit code."""
    SpecchatApp(profile_ref, **options).run()
    return 0
