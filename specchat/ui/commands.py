"""Command palette entries (Ctrl+P): profiles, γ, temperature and the app's actions. ``app`` is the
SpecchatApp, untyped here: app.py imports this module."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Iterable

from textual.app import SystemCommand
from textual.command import CommandListItem, SimpleCommand
from textual.markup import escape

from specchat.config import load_profile, profile_files
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

TEMPERATURES = (0.0, 0.3, 0.6, 0.8, 1.0, 1.2)


def profile_commands(app: Any, gpu: bool | None = None) -> list[CommandListItem]:
    """A command per profile, by name with its description; on a machine without a GPU
    (``gpu``: None reads the driver) a profile made for one says so and comes last."""
    if gpu is None:  # an NVIDIA driver's GPUs, read without torch (the UI never imports it)
        gpu = Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir())
    usable, gpu_only = [], []
    for name in profile_files():
        try:  # its description, or why it does not load, in one clean line
            profile = load_profile(name)
            about, needs_gpu = clean_line(profile.description or "no description"), profile.needs_gpu
        except SpecchatError as error:
            about, needs_gpu = clean_line(f"does not load: {error.message}"), False
        if needs_gpu and not gpu:
            about = f"needs a CUDA GPU, none here · {about}"
        command = SimpleCommand(name, partial(app.switch_profile, name), escape(about))  # help is markup
        (gpu_only if needs_gpu and not gpu else usable).append(command)
    return usable + gpu_only


def gamma_commands(app: Any) -> list[CommandListItem]:
    top = app.info.max_gamma if app.info else 8
    return [SimpleCommand("γ auto", partial(app.set_gamma, "auto"), "let the controller choose γ each step"),
            *(SimpleCommand(f"γ {k}", partial(app.set_gamma, k), f"propose {k} draft tokens per step")
              for k in range(1, top + 1))]


def temperature_commands(app: Any) -> list[CommandListItem]:
    return [SimpleCommand(f"temperature {t:.1f}", partial(app.set_temperature, t), "greedy" if t == 0 else "sampling")
            for t in TEMPERATURES]


# Textual's own entries that specchat's replace: its "Keys" panel (specchat's lists every
# key, F1) and its "Screenshot" (specchat's saves in the data dir): one of each in the palette
REPLACED_SYSTEM_COMMANDS = ("Keys", "Screenshot")


def system_commands(app: Any) -> Iterable[SystemCommand]:
    yield SystemCommand("Switch profile…", "Load another profile in the background", app.pick_profile)
    yield SystemCommand("Set γ…", "Number of speculative tokens per step", partial(app.search_commands, gamma_commands(app), "γ…"))
    yield SystemCommand("Set temperature…", "Sampling temperature for the next turn",
                        partial(app.search_commands, temperature_commands(app), "temperature…"))
    yield SystemCommand("New chat", "Clear the conversation", app.action_new_chat)
    yield SystemCommand("Copy…", "A reply or a code block of the chat to the clipboard", app.action_copy_reply)
    yield SystemCommand("Toggle Markdown view", "Provenance colours ↔ rendered Markdown", app.action_toggle_markdown)
    yield SystemCommand("Toggle speculation panel", "Show or hide the side panel", app.action_toggle_panel)
    yield SystemCommand("Toggle thinking", "Qwen3-style thinking on/off (next turn)", app.action_toggle_thinking)
    yield SystemCommand("Inspect tokens", "Provenance, p, q and alternatives of the last reply", app.action_inspect)
    yield SystemCommand("Sessions…", "Past recordings: replay one, or reopen it and keep chatting", app.action_history)
    yield SystemCommand("Search…", "Find words in this chat and in past sessions", app.action_search)
    yield SystemCommand("Save screenshot", "An SVG of the screen, in the data dir's screenshots/", app.action_screenshot)
    yield SystemCommand("Keys", "Show every key", app.action_help)
