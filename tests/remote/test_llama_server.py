"""specchat as the console of a real llama-server on 127.0.0.1 (built by
``make llama-server``): per-token provenance and the panel's counts equal the
server's own /metrics deltas, in ``specchat run --json`` and in the TUI; a recorded
remote chat replays without the server; every failure is one line and keeps the
partial reply; the RPC layout (rpc-server + llama-server --rpc) on one machine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from specchat.loading.embedded import find_gguf
from tests.support.cli import run_cli
from tests.support.llama_server_helpers import (REPEAT_PROMPT, SPEC_ARGS, FaultyProxy, free_port, llama_server,
                                                per_position_delta, server_dir, spec_counters, spec_delta)
from tests.support.needs import LLAMA_SERVER_NOT_BUILT

BIN = server_dir()
GGUF = find_gguf()
pytestmark = pytest.mark.skipif(BIN is None or GGUF is None,
                                reason=LLAMA_SERVER_NOT_BUILT)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = llama_server(BIN, GGUF, tmp_path_factory.mktemp("server") / "log.txt", *SPEC_ARGS)
    yield s
    s.stop()


KEY = "sk-not-to-be-recorded-5150"  # sent as a bearer token (the server ignores it), never written


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("T_LLAMA_KEY", KEY)


def profile(directory: Path, url: str, max_new_tokens: int = 48) -> Path:
    path = directory / "remote.toml"
    path.write_text(textwrap.dedent(f"""\
        description = "llama-server on loopback"
        [target]
        backend = "llama-server"
        url = "{url}"
        api_key_env = "T_LLAMA_KEY"
        [sampling]
        temperature = 0.0
        max_new_tokens = {max_new_tokens}
        """))
    return path


def run_json(profile_path: Path, prompt: str = REPEAT_PROMPT) -> tuple[subprocess.CompletedProcess, list, dict]:
    result = run_cli("run", "--profile", str(profile_path), "--prompt", prompt, "--json")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    tokens = [line for line in lines if line.get("type") != "summary"]
    summaries = [line for line in lines if line.get("type") == "summary"]
    return result, tokens, summaries[0] if summaries else {}


def recorded(stderr: str):
    from specchat.sessions.reader import read_recording

    path = next(line.split("recorded to ", 1)[1] for line in stderr.splitlines() if "recorded to " in line)
    return read_recording(path)


def test_run_json_provenance_and_counts_equal_the_servers_metrics(server, tmp_path):
    from specchat.events import StepEvent, TurnFinished

    before = spec_counters(server.url)
    result, tokens, summary = run_json(profile(tmp_path, server.url))
    after = spec_counters(server.url)
    assert result.returncode == 0, result.stderr
    delta = spec_delta(before, after)
    assert delta["num_drafts"] > 0, "the n-gram server drafted nothing: the test proves nothing"
    assert {k: summary[k] for k in delta} == delta
    assert len(tokens) == summary["num_tokens"] == after["llamacpp:tokens_predicted_total"] - before[
        "llamacpp:tokens_predicted_total"]
    kinds = [t["kind"] for t in tokens]
    assert kinds.count("accepted") == summary["num_accepted_tokens"]
    assert set(kinds) <= {"accepted", "resampled", "bonus", "target"} and "target" in kinds
    assert sum(summary["acceptance_histogram"]) == summary["num_drafts"]
    assert summary["mean_acceptance_length"] == pytest.approx(1 + delta["num_accepted_tokens"] / delta["num_drafts"])
    assert summary["cost_ratio"] is None and summary["predicted_speedup"] is None  # not derivable from a server
    assert "".join(t["text"] for t in tokens) == summary["text"]
    recording = recorded(result.stderr)
    steps = [e.event for e in recording.events if isinstance(e.event, StepEvent)]
    assert [t.kind for s in steps for t in s.step.tokens] == kinds
    per_position = per_position_delta(before, after)  # the server's acceptance at each draft position
    assert [sum(s.step.stats.num_accepted_tokens > i for s in steps) for i in range(len(per_position))] == per_position
    assert summary["server_counters"] == {**delta, "accepted_per_position": per_position}  # recorded per turn
    finished = [e.event for e in recording.events if isinstance(e.event, TurnFinished)]
    assert finished[0].text == summary["text"]
    assert KEY not in Path(recording.path).read_text() and KEY not in result.stdout + result.stderr


def test_tui_chat_matches_the_server_and_its_recording_replays_without_it(server, tmp_path):
    from tests.support.pilot import SIZE, chat
    from tests.sessions.test_tui import replayed_state, screen_state

    from specchat.live import LiveLoader
    from specchat.ui.app import SpecchatApp

    path = profile(tmp_path, server.url, max_new_tokens=32)

    async def live():
        app = SpecchatApp(str(path), loader=LiveLoader(record=True), deterministic=True)
        async with app.run_test(size=SIZE) as pilot:
            await chat(app, pilot, (REPEAT_PROMPT, "Again, the same text once more."), timeout=120)
            assert "cost_ratio" in app.loaded.backend.telemetry.underivable  # the source masks c: – while a reply streams, too
            return screen_state(app), app.info.recording

    before = spec_counters(server.url)
    state, recording = asyncio.run(live())
    delta = spec_delta(before, spec_counters(server.url))
    session = state["session"]
    assert {k: session[k] for k in delta} == delta and delta["num_drafts"] > 0
    shown = [t for reply in state["replies"] for t in reply[2]]
    assert len(shown) == session["num_tokens"]
    assert sum(1 for t in shown if t[1] == "accepted") == session["num_accepted_tokens"]
    assert asyncio.run(replayed_state(recording)) == state


# --- failures: one line each, the partial reply kept and recorded --------------------------


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("specchat: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_server_down_is_one_line_exit_2(tmp_path):
    result, tokens, _ = run_json(profile(tmp_path, f"http://127.0.0.1:{free_port()}"))
    assert result.returncode == 2 and not tokens
    assert "cannot reach the server" in one_error_line(result.stderr)


def test_wrong_url_is_one_line_exit_2(server, tmp_path):
    result, _, _ = run_json(profile(tmp_path, server.url + "/not-here"))
    assert result.returncode == 2
    assert "HTTP 404" in one_error_line(result.stderr)


@pytest.mark.parametrize("mode, words", [("drop", "without its final chunk"), ("garbage", "malformed chunk"),
                                         ("http500", "HTTP 500: model crashed")])
def test_stream_failures_are_one_line_and_keep_the_partial_reply(server, tmp_path, mode, words):
    from specchat.events import ErrorEvent, TurnFinished

    proxy = FaultyProxy(server.url, mode, after=6)
    try:
        result, tokens, summary = run_json(profile(tmp_path, proxy.url))
    finally:
        proxy.close()
    assert result.returncode == 1
    assert words in one_error_line(result.stderr) and "\x1b" not in result.stderr + result.stdout
    assert len(tokens) == (0 if mode == "http500" else 6)
    assert summary["finish_reason"] == "error" and summary["text"] == "".join(t["text"] for t in tokens)
    events = [e.event for e in recorded(result.stderr).events]
    assert any(isinstance(e, ErrorEvent) and words in e.message for e in events)
    assert [e.text for e in events if isinstance(e, TurnFinished)] == [summary["text"]]


@pytest.mark.parametrize("mode", ["drop", "stall"])
def test_after_a_failed_reply_the_partial_text_stays_and_the_next_message_works(server, tmp_path, monkeypatch, mode):
    import specchat.remote.http as remote_http
    from specchat.config import load_profile
    from specchat.events import ErrorEvent, TurnFinished
    from specchat.remote import open_chat

    monkeypatch.setattr(remote_http, "READ_TIMEOUT_S", 1.0)  # a slow server: 1 s of silence ends the stream
    proxy = FaultyProxy(server.url, mode, after=6, times=1)
    try:
        chat, _ = open_chat(load_profile(profile(tmp_path, proxy.url)))
        first = list(chat.send(REPEAT_PROMPT))
        second = list(chat.send("Now say hello."))
    finally:
        proxy.close()
    errors = [e.message for e in first if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and ("no data for 1 s" in errors[0] if mode == "stall" else "final chunk" in errors[0])
    partial = first[-1]
    assert isinstance(partial, TurnFinished) and partial.finish_reason == "error" and partial.text
    assert chat.history[1] == {"role": "assistant", "content": partial.text}
    assert not any(isinstance(e, ErrorEvent) for e in second) and second[-1].finish_reason == "eos"


def test_a_server_without_speculation_shows_target_tokens_and_says_so(tmp_path):
    s = llama_server(BIN, GGUF, tmp_path / "log.txt")
    try:
        result, tokens, summary = run_json(profile(tmp_path, s.url, max_new_tokens=12))
    finally:
        s.stop()
    assert result.returncode == 0, result.stderr
    assert tokens and {t["kind"] for t in tokens} == {"target"} and summary["num_drafts"] == 0
    assert summary["models"]["speculation_source"] == "the server reports no speculation"
    assert "[server] llama-server at" in result.stderr and "; no speculation" in result.stderr


def test_rpc_mode_layers_served_by_an_rpc_server(tmp_path):
    rpc_port = free_port()
    rpc = subprocess.Popen([str(BIN / "rpc-server"), "-H", "127.0.0.1", "-p", str(rpc_port)],
                           stdout=open(tmp_path / "rpc.txt", "wb"), stderr=subprocess.STDOUT)
    try:
        import time

        time.sleep(1.0)
        s = llama_server(BIN, GGUF, tmp_path / "log.txt", "--rpc", f"127.0.0.1:{rpc_port}", "-ngl", "99", *SPEC_ARGS)
        try:
            before = spec_counters(s.url)
            result, tokens, summary = run_json(profile(tmp_path, s.url, max_new_tokens=32))
            delta = spec_delta(before, spec_counters(s.url))
        finally:
            s.stop()
    finally:
        rpc.terminate()
        rpc.wait(10)
    assert result.returncode == 0, result.stderr
    assert tokens and {k: summary[k] for k in delta} == delta
    rpc_log = (tmp_path / "rpc.txt").read_text(errors="replace")
    assert "Accepted client connection" in rpc_log, rpc_log[-2000:]  # llama-server used the rpc-server device


def test_bench_sets_the_speculating_server_beside_a_plain_one(server, tmp_path):
    plain = llama_server(BIN, GGUF, tmp_path / "plain.txt")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": REPEAT_PROMPT}) + "\n")
    try:
        result = run_cli("bench", "--profile", str(profile(tmp_path, server.url)), "--prompts", str(prompts),
                         "--max-new-tokens", "40", "--plain-url", plain.url, "--out", str(tmp_path / "out"))
    finally:
        plain.stop()
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    spec, base = data["summary"]["speculative"], data["summary"]["plain"]
    assert spec["num_drafts"] > 0 and base["num_drafts"] == 0 and base["tokens"] > 0
    assert data["measured_speedup"] == pytest.approx(spec["tokens_per_s"] / base["tokens_per_s"])
    assert "measured speed-up (speculative / plain)" in result.stdout and "speculative" in result.stdout


def test_a_draft_model_server_of_the_same_weights_accepts_with_bonus_tokens(tmp_path):
    s = llama_server(BIN, GGUF, tmp_path / "log.txt", "--spec-type", "draft-simple", "--model-draft", str(GGUF),
                     "--spec-draft-n-max", "4")
    try:
        before = spec_counters(s.url)
        result, tokens, summary = run_json(profile(tmp_path, s.url, max_new_tokens=24), "Name three colours.")
        delta = spec_delta(before, spec_counters(s.url))
    finally:
        s.stop()
    assert result.returncode == 0, result.stderr
    assert {k: summary[k] for k in delta} == delta and delta["num_drafts"] > 0
    kinds = [t["kind"] for t in tokens]
    assert "bonus" in kinds and kinds.count("accepted") == summary["num_accepted_tokens"]
