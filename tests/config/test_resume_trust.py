"""--resume carries a chat on with the profile the recording carries, as data: no
profile file or code it names is ever loaded, and its trust_remote_code = true is
refused unless the user passes --trust-remote-code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.config import load_profile
from specchat.config.recorded import profile_from_recording
from specchat.errors import ProfileError
from specchat.sessions.recorder import Recorder, build_header
from tests.support.sessions_helpers import cli, sample_events

# A model repo whose own Python code leaves a mark if anything ever imports it.
CONFIG = {"model_type": "evil", "architectures": ["EvilForCausalLM"],
          "auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                       "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}}
CODE = "import pathlib\npathlib.Path({marker!r}).write_text('the repo code ran')\n"


@pytest.fixture
def shared(tmp_path) -> tuple[Path, Path, Path]:
    """(a shared recording whose profile trusts remote code, that profile's file, the marker)."""
    marker = tmp_path / "code-ran"
    repo = tmp_path / "evil-model"
    repo.mkdir()
    (repo / "config.json").write_text(json.dumps(CONFIG))
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (repo / name).write_text(CODE.format(marker=str(marker)))
    profile_file = tmp_path / "evil.toml"
    profile_file.write_text(f"trust_remote_code = true\n[target]\nsource = '{repo}'\n[speculation]\nmethod = 'none'\n")
    path = tmp_path / "data" / "sessions" / "shared.jsonl"
    path.parent.mkdir(parents=True)
    with Recorder(path) as rec:
        rec.start(build_header(load_profile(profile_file), {"target": {"source": str(repo)}}))
        for event in sample_events()[:-1]:
            rec.record(event)
    return path, profile_file, marker


def test_resume_refuses_a_recorded_trust_remote_code_in_one_line_before_anything_loads(shared, tmp_path):
    path, _, marker = shared
    proc = cli("--resume", str(path), env_dir=tmp_path / "data")  # torch and transformers blocked
    lines = [x for x in proc.stderr.splitlines() if not x.startswith("HEAVY=")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr
    assert "trust_remote_code = true" in lines[0] and "--trust-remote-code" in lines[0] and "shared.jsonl" in lines[0]
    assert not marker.exists()


def test_resume_uses_the_recorded_profile_never_the_file_it_names(shared, monkeypatch):
    """The recorded profile said trust_remote_code = false; the file it names says true
    now (edited, or planted by whoever shared it): resume goes by the recording."""
    import specchat.live as live

    path, profile_file, marker = shared
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head["profile"]["trust_remote_code"] = False
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    built = []
    monkeypatch.setattr(live, "_build", lambda ref, progress, record: built.append(ref) or (_ for _ in ()).throw(SystemExit))
    with pytest.raises(SystemExit):
        live.resume_loader(path)(None, lambda _: None)
    (profile,) = built
    assert profile.trust_remote_code is False and profile.name == "evil"
    assert profile.source_path == profile_file  # relative model paths resolve as they did live
    assert not marker.exists()


def test_the_flag_lets_the_recorded_setting_through(shared):
    path, _, _ = shared
    data = json.loads(path.read_text().splitlines()[0])["profile"]
    with pytest.raises(ProfileError, match="pass --trust-remote-code only if you trust"):
        profile_from_recording(data, str(path))
    assert profile_from_recording(data, str(path), trust_remote_code=True).trust_remote_code is True


@pytest.mark.parametrize("change, message", [
    ({"extends": "/somewhere/evil.toml"}, "'extends', which is never followed"),
    ({"sampling": {"temperature": float("nan")}}, "key 'sampling.temperature' has bad value nan"),
    ({"target": {"source": 3}}, "key 'target.source' must be a string"),
    ({"surprise": 1}, "key 'surprise' is unknown"),
])
def test_a_recorded_profile_is_validated_like_a_profile_file(shared, change, message):
    path, _, _ = shared
    data = {**json.loads(path.read_text().splitlines()[0])["profile"], **change}
    with pytest.raises(ProfileError) as info:
        profile_from_recording(data, str(path), trust_remote_code=True)
    assert message in str(info.value) and "--profile NAME" in str(info.value) and "\n" not in str(info.value)


def test_every_shipped_profile_comes_back_whole_from_a_recording_header():
    from specchat.config import load_all_profiles

    loaded, failed = load_all_profiles()
    assert loaded and not failed
    for profile in loaded:
        header = build_header(profile)  # what a recording carries
        assert profile_from_recording(header.profile, "rec.jsonl") == profile, profile.name


def test_a_recorded_suffix_store_path_becomes_your_own_store(tmp_path):
    """A shared recording could name any path as its store: resuming would read it and
    write your replies there. Its path gives way to "auto" (the data dir's store)."""
    profile_file = tmp_path / "store.toml"
    elsewhere = tmp_path / "elsewhere" / "replies.bin"
    profile_file.write_text(f'extends = "default"\n[speculation]\nmethod = "suffix"\nsuffix_store = "{elsewhere}"\n')
    recorded = build_header(load_profile(profile_file)).profile
    assert recorded["speculation"]["suffix_store"] == str(elsewhere)
    assert profile_from_recording(recorded, "shared.jsonl").speculation.suffix_store == "auto"
    for kept in ("off", "auto"):
        recorded["speculation"]["suffix_store"] = kept
        assert profile_from_recording(recorded, "shared.jsonl").speculation.suffix_store == kept
