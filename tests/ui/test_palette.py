"""Ctrl+P as a newcomer meets it: profiles by name (not a machine path) with their
descriptions; on a machine without a GPU, the profiles made for one say so and come last;
Keys (and Screenshot) once each, specchat's, not Textual's beside them. Planted bug:
Textual's system commands passed through whole — caught."""

from __future__ import annotations

import asyncio

import pytest
from textual.command import CommandPalette
from textual.widgets import OptionList

from specchat.config import load_profile
from specchat.ui import app as app_module
from specchat.ui.commands import profile_commands
from tests.support.mutations import patched
from tests.ui.test_ui_snapshots import SIZE, _finished, recording, replay_app  # noqa: F401 (a fixture)


class Host:
    def switch_profile(self, name):
        pass


@pytest.mark.parametrize("gpu", [False, True])
def test_profiles_by_name_with_descriptions_gpu_ones_marked_and_last_without_a_gpu(gpu):
    commands = profile_commands(Host(), gpu=gpu)
    names = [c.name for c in commands]
    assert "default" in names and "qwen3-8b" in names and not any("/" in n or n.endswith(".toml") for n in names)
    by_name = {c.name: c.help_text for c in commands}
    assert by_name["default"] == load_profile("default").description.replace("[", "\\[")
    needs = [load_profile(n).needs_gpu for n in names]
    marked = [c.help_text.startswith("needs a CUDA GPU, none here · ") for c in commands]
    assert marked == [n and not gpu for n in needs]
    if not gpu:  # every usable profile before the first GPU one
        assert needs == sorted(needs) and any(needs)


def palette(recording) -> tuple[list[str], list[str]]:
    """(the system commands' titles, the prompts the profile picker lists), in the app."""
    async def run():
        app = replay_app(recording)
        async with app.run_test(size=SIZE) as pilot:
            await _finished(pilot)
            titles = [c.title for c in app.get_system_commands(app.screen)]
            app.pick_profile()
            await pilot.pause(0.3)
            assert isinstance(app.screen, CommandPalette)
            options = app.screen.query_one(OptionList)
            prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        return titles, prompts

    return asyncio.run(run())


def test_the_palette_lists_keys_once_and_profiles_without_paths(recording):
    titles, prompts = palette(recording)
    assert titles.count("Keys") == 1 and "Screenshot" not in titles and titles.count("Save screenshot") == 1
    assert prompts and not any("/profiles/" in p or ".toml" in p for p in prompts), prompts


def test_planted_textuals_commands_passed_through_whole_is_caught(recording):
    with patched(app_module, "REPLACED_SYSTEM_COMMANDS", ()), pytest.raises(AssertionError):
        test_the_palette_lists_keys_once_and_profiles_without_paths(recording)
