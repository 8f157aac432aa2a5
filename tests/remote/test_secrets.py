"""Secrets are never printed, recorded or exported: a key that a server echoes in an
error body (401 before the reply, 500 during it) and a password written in the URL
are redacted wherever server text is shown or stored — stderr, the recording, the
Markdown and cast exports, the headless replay. The server is a loopback stand-in."""

from __future__ import annotations

import pytest

from specchat.redact import redact, redact_url
from tests.support.hostile_server import HostileServer, llama_profile, llama_routes
from tests.support.sessions_helpers import cli

KEY = "sk-live-31415926535"
PASSWORD = "hunter2-pass"


@pytest.mark.parametrize("text, secrets, expected", [
    ("bad key sk-1 (sk-1)", ["sk-1"], "bad key *** (***)"),
    ("http://user:pw@host:8/x and https://tok@h/", [], "http://***@host:8/x and https://***@h/"),
    ("http://host/a@b", [], "http://host/a@b"),  # an @ in the path is no user info
    ("key abcdef, part abc", ["abc", "abcdef"], "key ***, part ***"),  # the longer first: no tail left
    ("nothing here", [None, ""], "nothing here"),
])
def test_redact_table(text, secrets, expected):
    assert redact(text, secrets) == expected


def test_redact_url_keeps_urls_without_user_info():
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"


@pytest.fixture
def echoing(tmp_path, monkeypatch):
    """A server that echoes the key it was sent and the URL it was reached at in a 500
    error mid-reply; a profile reaching it with a key and a password in the URL."""
    def fail(request, _):
        return 500, {"error": {"message": f"upstream refused {request.headers.get('Authorization')} "
                                          f"for http://admin:{PASSWORD}@127.0.0.1/"}}

    server = HostileServer({**llama_routes(), "/completion": fail})
    monkeypatch.setenv("T_SERVER_KEY", KEY)
    url = server.url.replace("http://", f"http://admin:{PASSWORD}@")
    yield server, llama_profile(tmp_path, url, "T_SERVER_KEY")
    server.close()


def everything_written(proc, data) -> str:
    """The process's output and every file it could have written under ``data`` but the profile."""
    files = "\n".join(p.read_text(errors="replace") for p in sorted(data.rglob("*")) if p.is_file() and p.suffix != ".toml")
    return proc.stdout + proc.stderr + files


def test_a_key_echoed_in_an_error_mid_reply_is_nowhere_on_screen_or_on_disk(echoing, tmp_path):
    server, profile = echoing
    data = tmp_path / "data"
    proc = cli("run", "--profile", str(profile), "--prompt", "hi", env_dir=data)
    assert proc.returncode == 1 and "answered HTTP 500: upstream refused Bearer ***" in proc.stderr
    assert server.requests[-1].headers["Authorization"] == f"Bearer {KEY}"  # it was sent, to the URL's host
    (recording,) = (data / "sessions").glob("*.jsonl")
    outputs = [proc]
    for args in (("--to", "markdown", "-o", str(tmp_path / "out.md")), ("--to", "cast", "-o", str(tmp_path / "out.cast")),
                 ("--headless", "--speed", "max")):
        outputs.append(cli("replay", str(recording), *args, env_dir=data))
        assert outputs[-1].returncode in (0, 1), outputs[-1].stderr
    written = "\n".join(everything_written(p, tmp_path) for p in outputs)
    assert r"refused Bearer \*\*\*" in (tmp_path / "out.md").read_text()  # the error is exported, redacted
    assert KEY not in written and PASSWORD not in written


def test_a_key_echoed_in_a_401_before_the_reply_is_not_printed(tmp_path, monkeypatch):
    def refuse(request, _):
        return 401, {"error": {"message": f"invalid api key {request.headers.get('Authorization')}"}}

    server = HostileServer({"/health": refuse})
    try:
        monkeypatch.setenv("T_SERVER_KEY", KEY)
        url = server.url.replace("http://", f"http://admin:{PASSWORD}@")
        proc = cli("run", "--profile", str(llama_profile(tmp_path, url, "T_SERVER_KEY")), "--prompt", "hi",
                   env_dir=tmp_path / "data")
    finally:
        server.close()
    assert proc.returncode == 2 and "answered HTTP 401: invalid api key Bearer ***" in proc.stderr
    assert "http://***@127.0.0.1" in proc.stderr
    assert KEY not in everything_written(proc, tmp_path) and PASSWORD not in everything_written(proc, tmp_path)
