"""A recording never chooses where specchat connects or what it sends: resuming or
reopening one whose profile names a server makes no request to it, and reads no
variable it names, until the user passes --trust-recorded-server (or chooses a profile
of their own with --profile). The server is a loopback stand-in that keeps every request."""

from __future__ import annotations

import asyncio

import pytest

from specchat.config import load_profile
from specchat.live import resume_loader
from specchat.sessions.recorder import Recorder, build_header
from tests.support.hostile_server import HostileServer, vllm_profile, vllm_routes
from tests.support.sessions_helpers import cli, sample_events

RECORDED_SECRET = "recorded-secret-0451"
USER_SECRET = "user-secret-2718"


@pytest.fixture
def server():
    server = HostileServer(vllm_routes())
    yield server
    server.close()


@pytest.fixture
def shared(tmp_path, server, monkeypatch):
    """A shared recording whose profile names the stand-in and a variable that holds a secret."""
    monkeypatch.setenv("T_RECORDED_KEY", RECORDED_SECRET)
    profile = load_profile(vllm_profile(tmp_path, server.url, "T_RECORDED_KEY"))
    path = tmp_path / "data" / "sessions" / "shared.jsonl"
    path.parent.mkdir(parents=True)
    with Recorder(path) as rec:
        rec.start(build_header(profile, {"backend": "vllm", "url": server.url, "target": "m"}))
        for event in sample_events()[:6]:  # one whole turn
            rec.record(event)
    return path


def test_resume_refuses_a_recorded_server_in_one_line_before_any_request(shared, server, tmp_path):
    proc = cli("--resume", str(shared), env_dir=tmp_path / "data")
    lines = [x for x in proc.stderr.splitlines() if not x.startswith("HEAVY=")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr
    for words in (server.url, "$T_RECORDED_KEY", "--trust-recorded-server", "--profile NAME", "shared.jsonl"):
        assert words in lines[0]
    assert server.requests == []


def test_reopening_from_the_history_screen_is_refused_with_a_notice_and_no_request(shared, server):
    from tests.support.pilot import SIZE, wait_for
    from specchat.ui.app import SpecchatApp
    from specchat.ui.backend import replay_loader

    async def run() -> list[str]:
        app = SpecchatApp(loader=replay_loader(shared, "max"), reopen=lambda p: resume_loader(p, quiet=True),
                          deterministic=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.turns_ended >= 1, what="the replay")  # a replay connects nowhere
            app.open_recording((shared, "resume"))  # what the history screen's "o" hands the app
            await pilot.pause(0.2)
            return [n.message for n in app._notifications]

    notices = asyncio.run(run())
    assert any("--trust-recorded-server" in n and server.url in n and "$T_RECORDED_KEY" in n for n in notices)
    assert server.requests == []


def test_the_flag_connects_sending_only_the_variable_the_refusal_named(shared, server):
    loaded = resume_loader(shared, trust_recorded_server=True)(None, lambda _: None)
    try:
        list(loaded.backend.send("hi"))
    finally:
        loaded.close()
    assert [r.path for r in server.requests][:1] == ["/v1/models"]
    assert {r.headers.get("Authorization") for r in server.requests} == {f"Bearer {RECORDED_SECRET}"}


def test_resume_with_your_own_profile_never_reads_the_recorded_variable(shared, server, tmp_path, monkeypatch):
    monkeypatch.setenv("T_USER_KEY", USER_SECRET)
    mine = vllm_profile(tmp_path, server.url, "T_USER_KEY", name="mine")
    loaded = resume_loader(shared, str(mine))(None, lambda _: None)
    try:
        list(loaded.backend.send("hi"))
    finally:
        loaded.close()
    assert server.requests and {r.headers.get("Authorization") for r in server.requests} == {f"Bearer {USER_SECRET}"}
    assert RECORDED_SECRET not in server.sent()
