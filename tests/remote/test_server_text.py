"""All server text goes through the one sanitiser: the line ``[server] … serves <name>``
that ``run`` and ``demo --headless`` print on connecting shows a hostile ``/props``
``model_path`` (llama-server) or ``/v1/models`` id (vLLM) inert — no window title, no
screen clear, no OSC 52 clipboard write — and without the key the server was sent."""

from __future__ import annotations

import json

from tests.support.hostile_server import HostileServer, llama_profile, llama_routes, vllm_profile, vllm_routes
from tests.support.sessions_helpers import cli

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m"
KEY = "sk-live-27182818"


def assert_inert(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)
    assert "pwned" not in text and "ZXZpbA" not in text


def test_run_shows_a_llama_server_model_path_inert_and_without_the_key(tmp_path, monkeypatch):
    def props(request, _):
        name = f"{ESCAPES}evil.gguf {request.headers.get('Authorization')}"
        return 200, {"model_path": name, "build_info": ESCAPES + "b1",
                     "default_generation_settings": {"params": {"speculative.types": ESCAPES + "draft"}}}

    server = HostileServer({**llama_routes(), "/props": props})
    monkeypatch.setenv("T_SERVER_KEY", KEY)
    try:
        proc = cli("run", "--profile", str(llama_profile(tmp_path, server.url, "T_SERVER_KEY")), "--prompt", "hi",
                   env_dir=tmp_path / "data")
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("[server]")]
    assert "serves evil.gguf Bearer ***" in line
    assert_inert(proc.stderr + proc.stdout)
    (recording,) = (tmp_path / "data" / "sessions").glob("*.jsonl")
    header = recording.read_text().splitlines()[0]
    assert KEY not in header and "evil.gguf" in json.loads(header)["models"]["target"]


def test_demo_headless_shows_a_vllm_model_id_inert_and_still_asks_for_it(tmp_path):
    model = ESCAPES + "org/evil-model"
    server = HostileServer(vllm_routes(model))
    script = tmp_path / "script.txt"
    script.write_text("Say hi\n")
    try:
        proc = cli("demo", "--headless", "--script", str(script), "--profile", str(vllm_profile(tmp_path, server.url)),
                   env_dir=tmp_path / "data")
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("[server]")]
    assert "serves org/evil-model" in line
    assert_inert(proc.stderr + proc.stdout)
    (chat,) = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert json.loads(chat.body)["model"] == model  # the id as the server spells it, sent back, never shown
