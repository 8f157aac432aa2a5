"""A recording as the UI's :class:`~specchat.ui.backend.EventSource`, consumed exactly as a live
chat's events are (the panel, the colours and the inspector come out the same)."""

from __future__ import annotations

import os
import threading
from typing import Any, Iterator

from specchat.sessions.reader import Recording, read_recording
from specchat.sessions.replay import parse_speed, recorded_settings, recording_telemetry, replay_events
from specchat.telemetry import MetricsSnapshot


class ReplayBackend:
    """Plays a recording with its recorded timing divided by ``speed`` ("max": no waits). It is
    read here, so an unreadable file fails while the UI is still "loading", in one line; a
    damaged one plays up to the damage, then an ErrorEvent names it."""

    can_send = False  # plays by itself (specchat.ui.backend.EventSource)

    def __init__(self, source: Recording | str | os.PathLike[str], speed: float | str = 1.0) -> None:
        self.recording = source if isinstance(source, Recording) else read_recording(source)
        self.speed = parse_speed(speed)
        self._cancelled = threading.Event()
        # the recorded steps folded as they play, as the turn loop folded them live
        self.telemetry = recording_telemetry(self.recording)

    def backend_info(self) -> dict[str, Any]:
        """The recorded profile's speculation settings as ``BackendInfo`` fields, so the
        panel is sized and labelled as it was live (method, γ, its ceiling, temperature)."""
        models = self.recording.header.models
        from specchat.remote.servers import is_server_session, server_fields

        if is_server_session(models):  # a server's session: its own γ and method
            return server_fields(models)
        settings = recorded_settings(self.recording.header.profile)
        fields: dict[str, Any] = {"method": settings["method"], "max_gamma": settings["max_gamma"]}
        if settings["method"] != "none":
            fields["num_speculative_tokens"] = settings["num_speculative_tokens"]
        if settings["temperature"] is not None:
            fields["temperature"] = settings["temperature"]
        return fields

    def events(self) -> Iterator[Any]:
        """The recorded events (header excluded), each after its recorded delay.
        Stops early, between events, once :meth:`cancel` is called."""
        for delay, event in replay_events(self.recording, self.speed):
            if delay > 0 and self._cancelled.wait(delay):
                return
            if self._cancelled.is_set():
                return
            self.telemetry.replay(event)
            yield event

    def cancel(self) -> None:
        """Thread-safe: called from the UI thread while :meth:`events` runs in a worker."""
        self._cancelled.set()

    def close(self) -> None:
        """Nothing held: the file was read whole when this was built."""

    @property
    def turn_metrics(self) -> MetricsSnapshot:
        return self.telemetry.turn

    @property
    def session_metrics(self) -> MetricsSnapshot:
        return self.telemetry.session
