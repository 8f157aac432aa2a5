"""The app's user controls (keys and palette commands): a mixin of
:class:`specchat.ui.app.SpecchatApp` that changes the live backend's settings between (or during)
turns."""

from __future__ import annotations

from typing import Any

from specchat.ui.copying import CopyChoice, copy_choices
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.copy import CopyScreen
from specchat.ui.screens.help import HelpScreen
from specchat.ui.screens.inspector import InspectorScreen


class Controls:
    @property
    def view(self) -> ChatScreen:
        """The chat on screen, which the view keys act on: the live one, or a replay beside it."""
        return self.screen if isinstance(self.screen, ChatScreen) else self.chat

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
        if self.loaded is not None and not self.loaded.can_send:  # a replay or a demo: it plays by itself
            parts.append("playing… Esc stops it" if self.generating else "played: nothing to send")
        else:
            parts.append("answering… Esc cancels" if self.generating else "ready")
        self.chat.status.set_text(" · ".join(parts))

    def action_cancel(self) -> None:
        if self.generating and self.loaded is not None:
            self.loaded.backend.cancel()
            self.chat.status.set_text("cancelling…")

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):  # F1 toggles
            self.screen.dismiss(None)
            return
        self.push_screen(HelpScreen(list(self.BINDINGS)))

    def action_toggle_panel(self) -> None:
        self.view.panel.display = not self.view.panel.display

    def action_toggle_markdown(self) -> None:
        view = self.view
        markdown = not view.transcript.markdown
        view.transcript.set_markdown(markdown)
        view.query_one("#legend").set_view("markdown" if markdown else "provenance")  # type: ignore[attr-defined]

    def action_inspect(self) -> None:
        if isinstance(self.screen, InspectorScreen):  # F4 toggles
            self.screen.dismiss(None)
            return
        self.push_screen(InspectorScreen(self.view.last_tokens))

    def action_new_chat(self) -> None:
        if self.generating:
            self._reset_after_turn = True
            self.action_cancel()
            return
        if self.loaded is not None and self.loaded.can_send:
            self.loaded.backend.reset()
        self.chat.current = None
        self.call_later(self.chat.transcript.clear_chat)
        self.notify("new chat")

    def action_copy_reply(self) -> None:
        """Ctrl+O: a reply or a code block of the chat on screen, the last reply first."""
        if isinstance(self.screen, CopyScreen):  # the key toggles
            self.screen.dismiss(None)
            return
        replies = [reply.text for reply in self.view.transcript.replies]
        if not any(replies):
            self.notify("no reply to copy yet", severity="warning")
            return
        self.push_screen(CopyScreen(copy_choices(replies)), self._copy)

    def _copy(self, choice: CopyChoice | None) -> None:
        if choice is None:
            return
        self.copy_to_clipboard(choice.text)
        self.notify(f"copied {choice.what} ({len(choice.text):,} characters)")

    def _live_backend(self) -> Any | None:
        if self.loaded is None or not self.loaded.can_send:
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
        self.chat.panel.gamma = gamma  # the verdict speaks of the γ the chat now runs at
        self.chat.flush_panel(force=True)
        self._update_status()

    def action_gamma(self, delta: int) -> None:
        info = self.info
        if info is None:
            return
        choices: list[int | str] = [*range(1, info.max_gamma + 1), "auto"]
        current = info.num_speculative_tokens
        index = choices.index(current) if current in choices else 0
        self.set_gamma(choices[max(0, min(len(choices) - 1, index + delta))])

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
