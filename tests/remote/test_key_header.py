"""A key that an HTTP header cannot carry (pasted with a typographic dash, a trailing
newline) is refused in one line naming the variable that holds it, before any request,
never with the key in it: `run` and `bench` against a remote profile exit 2. Planted
bug: without the check, httpx raises UnicodeEncodeError while building the
Authorization header and `run` dies with a traceback (exit 1)."""

from __future__ import annotations

import pytest

from tests.support.hostile_server import HostileServer, llama_profile, llama_routes
from tests.support.sessions_helpers import cli

PARTS = ("sk-live", "31415926535")  # the key's own characters: none may be shown
KEY = f"{PARTS[0]}\u2013{PARTS[1]}"  # an en dash where the issuer wrote "-"


@pytest.mark.parametrize("key, says", [
    (KEY, "character 8 of 19 is U+2013 EN DASH"),
    (f"{PARTS[0]}-{PARTS[1]}\n", "character 20 of 20 is U+000A a control character"),
    (f" {PARTS[0]}-{PARTS[1]}", "it begins or ends with a space"),
])
def test_an_uncarriable_key_is_one_line_naming_the_variable(key, says, monkeypatch):
    from specchat.remote.http import Endpoint, RemoteError

    monkeypatch.setenv("T_SERVER_KEY", key)
    with pytest.raises(RemoteError) as caught:  # refused before any connection: no server needed
        Endpoint("http://127.0.0.1:9", "T_SERVER_KEY").get_json("/health")
    line = str(caught.value)
    assert "T_SERVER_KEY" in line and "an HTTP header cannot carry" in line and says in line, line
    assert "\n" not in line and not any(part in line for part in PARTS)


@pytest.mark.parametrize("command", [("run", "--prompt", "hi"),
                                     ("bench", "--prompts", "repetitive", "--max-new-tokens", "4")])
def test_run_and_bench_against_a_remote_profile_exit_2_in_one_line(command, tmp_path, monkeypatch):
    server = HostileServer(llama_routes())
    try:
        monkeypatch.setenv("T_SERVER_KEY", KEY)
        extra = ("--out", str(tmp_path / "bench")) if command[0] == "bench" else ()
        proc = cli(*command, *extra, "--profile", str(llama_profile(tmp_path, server.url, "T_SERVER_KEY")),
                   env_dir=tmp_path / "data")
    finally:
        server.close()
    errors = [line for line in proc.stderr.splitlines() if line.startswith("specchat: error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "T_SERVER_KEY" in errors[0] and "cannot carry" in errors[0] and "Traceback" not in proc.stderr
    assert not any(part in proc.stdout + proc.stderr for part in PARTS)
    assert server.requests == []  # nothing was sent with or without the key
