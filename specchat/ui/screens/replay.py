"""A recorded session replayed beside the live chat, on a screen of its own, played in a
thread worker with a pump of its own. Design notes: docs/design/ui.md
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.binding import Binding

from specchat.errors import one_line
from specchat.events import ErrorEvent, Loaded, LoadProgress
from specchat.sanitize import clean_data, clean_line
from specchat.ui.backend import LoadedBackend, replay_loader
from specchat.ui.figures import FigureFeed
from specchat.ui.pump import EventPump, EventsReady
from specchat.ui.screens.chat import ChatScreen


class _Ended:
    """The worker's marker: the replay is over (played out, stopped or failed)."""


class ReplayScreen(ChatScreen):
    LIVE = False
    BINDINGS = [Binding("escape", "leave", "Stop replay / back to chat")]

    def __init__(self, path: Path, speed: float | str = 1.0, hide_timing: bool = False,
                 cursor_blink: bool = True) -> None:
        super().__init__(hide_timing=hide_timing, cursor_blink=cursor_blink, id="replay")
        self.path = Path(path)
        self.speed = speed
        self.name_shown = clean_line(self.path.name)
        self.pump = EventPump(self)
        self.loaded: LoadedBackend | None = None
        self.playing = True

    def on_mount(self) -> None:
        self.sub_title = f"replay of {self.name_shown}"
        self.status.set_text(f"replay of {self.name_shown} · reading… · Esc stops it")
        self._play()

    def on_unmount(self) -> None:
        if self.loaded is not None:
            self.loaded.backend.cancel()  # the worker ends at its next event

    @work(thread=True, exclusive=True, group="replay")
    def _play(self) -> None:
        try:
            loaded = replay_loader(self.path, self.speed)(None, self.pump.put)
        except Exception as exc:  # an unreadable recording: one line in the replay's chat
            self.pump.put(ErrorEvent(f"cannot replay {self.path.name}: {one_line(exc)}"))
            self.pump.put_marker(_Ended())
            return
        self.pump.put_marker(loaded)
        feed = FigureFeed(loaded.backend)
        try:
            for event in loaded.backend.events():
                self.pump.hand_over(event, feed)
        except Exception as exc:
            self.pump.put(ErrorEvent(f"replay stopped: {one_line(exc)}"))
        finally:
            self.pump.put_marker(_Ended())

    @on(EventsReady)
    def _drain(self, message: EventsReady) -> None:
        message.stop()  # this screen's pump: the app's own drain is not concerned
        if not self.can_show:
            return
        batch: list[Any] = []
        for _, event in self.pump.drain():
            if isinstance(event, LoadProgress):
                continue  # reading a file: the status line says so already
            if isinstance(event, (LoadedBackend, _Ended)):
                self.apply_events(batch)
                batch = []
                self._install(event) if isinstance(event, LoadedBackend) else self._ended()
            else:
                batch.append(event)
        self.apply_events(batch)

    def _install(self, loaded: LoadedBackend) -> None:
        self.loaded = loaded
        info = loaded.info = clean_data(loaded.info)  # a recording's names: inert before they are shown
        self.reset_figures(info.max_gamma, info.method, gamma=info.num_speculative_tokens)
        self.apply_events([Loaded(info.profile_name, info.description)])
        if not self.playing:  # Esc came while the file was read
            loaded.backend.cancel()
            return
        self.status.set_text(f"replay of {self.name_shown} ({info.profile_name}) · playing… · Esc stops it")

    def _ended(self) -> None:
        self.turn_ended()
        self.flush_panel(force=True)
        how = "stopped" if not self.playing else "over"
        self.playing = False
        self.status.set_text(f"replay of {self.name_shown} {how} · Esc: back to the chat")

    def action_leave(self) -> None:
        """Esc: stops a replay that plays, or goes back to the chat once it is over."""
        if not self.playing:
            self.dismiss(None)
            return
        self.playing = False
        if self.loaded is not None:
            self.loaded.backend.cancel()
        self.status.set_text(f"replay of {self.name_shown} · stopping…")
