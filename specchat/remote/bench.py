"""``specchat bench`` on a remote profile: the server with speculation against the same model
served without it (``--plain-url``); and the closed loop and slot check concurrent benches
use. Design notes: docs/design/remote.md"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat.events import StepEvent, TurnFinished
from specchat.remote.http import Endpoint, RemoteError


def _measure(chat, prompt: str) -> dict[str, Any]:
    tokens, gen_ms, finished = 0, 0.0, None
    chat.reset()
    for event in chat.send(prompt):
        if isinstance(event, StepEvent):
            tokens += len(event.step.tokens)
            gen_ms += event.step.stats.verify_ms
        elif isinstance(event, TurnFinished):
            finished = event
    turn = (finished.metrics or {}).get("turn", {}) if finished else {}
    return {"tokens": tokens, "generation_ms": gen_ms,
            "tokens_per_s": tokens / (gen_ms / 1000) if gen_ms > 0 else None,
            "finish_reason": finished.finish_reason if finished else "error",
            **{k: turn.get(k) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                         "mean_acceptance_length", "draft_acceptance_rate")}}


def closed_loop(jobs: list, workers: list, work: Callable[[Any, int, Any], None]) -> None:
    """N clients sharing one queue of ``jobs``, closed loop: ``work(worker, i, job)`` for each,
    one client per entry of ``workers`` (a single one in this thread, where Ctrl-C lands).
    The first failure stops the clients from taking more jobs and is re-raised here."""
    todo: queue.Queue = queue.Queue()
    for item in enumerate(jobs):
        todo.put(item)
    failed: list[BaseException] = []

    def client(worker: Any) -> None:
        while not failed:
            try:
                i, job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                work(worker, i, job)
            except BaseException as exc:  # noqa: BLE001 — re-raised in the caller's thread
                failed.append(exc)

    if len(workers) == 1:
        client(workers[0])
    else:
        threads = [threading.Thread(target=client, args=(w,), daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failed:
        raise failed[0]


def _serve(chats: list, jobs: list[tuple[str, Any, int, int]]) -> tuple[list[dict], float]:
    """The jobs (set name, prompt, repeat, max_new_tokens), one client per chat, closed loop →
    (measurements in job order with ``start_ms`` and ``wall_ms``, the run's wall ms)."""
    measured: list[dict] = [{} for _ in jobs]
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * len(jobs)

    def work(chat, i: int, job: tuple[str, Any, int, int]) -> None:
        _, prompt, _, limit = job
        chat.max_new_tokens = limit
        start = time.perf_counter()
        measured[i] = _measure(chat, prompt.text)
        spans[i] = (start, time.perf_counter())

    closed_loop(jobs, chats, work)
    if not jobs:
        return [], 0.0
    first = min(start for start, _ in spans)
    for m, (start, end) in zip(measured, spans):
        m.update(start_ms=(start - first) * 1000, wall_ms=(end - start) * 1000)
    return measured, (max(end for _, end in spans) - first) * 1000


def check_concurrency(url: str, n: int, api_key_env: str | None = None) -> None:
    """RemoteError (one line) when the server at ``url`` decodes fewer than ``n`` requests
    at once (``total_slots`` in ``GET /props``); nothing when it does not say (vLLM has no
    /props and batches by itself)."""
    endpoint = Endpoint(url, api_key_env)
    try:
        props = endpoint.get_json("/props")
    except RemoteError as exc:
        if exc.status == 404:
            return
        raise
    slots = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots < n:
        raise RemoteError(f"the server at {endpoint.url} has {slots} parallel slots; --concurrency {n} needs {n}",
                          hint="start llama-server with -np N, or lower --concurrency")


def remote_bench(profile, sets, *, plain_url: str | None, repeat: int = 1, max_new_tokens: int | None = None,
                 concurrency: int = 1, say=print) -> dict[str, Any]:
    """Runs every prompt on the speculative server (the profile's url) and, with
    ``plain_url``, on the plain one, ``concurrency`` streams at a time; returns the
    results document."""
    from specchat.remote.connect import open_chat

    configs = {"speculative": profile}
    if plain_url:
        configs["plain"] = profile.replace(target={"url": plain_url})
    else:
        say("bench: no --plain-url (a second server of the same model without speculation): "
            "measuring the speculative server alone; no speed-up can be computed")
    jobs = [(s.name, prompt, r, max_new_tokens or s.max_new_tokens)
            for s in sets for prompt in s.prompts for r in range(repeat)]
    rows, walls = [], {}
    for name, prof in configs.items():
        if concurrency > 1:
            check_concurrency(prof.target.url, concurrency, prof.target.api_key_env)
        opened = [open_chat(prof) for _ in range(max(1, concurrency))]
        info = opened[0][1]
        if name == "plain" and info.get("server_num_speculative_tokens"):
            say(f"bench: warning: the --plain-url server speculates ({info.get('server_speculative')})")
        measured, walls[name] = _serve([chat for chat, _ in opened], jobs)
        rows += [{"config": name, "set": set_name, "prompt": prompt.id, "repeat": r, **m}
                 for (set_name, prompt, r, _), m in zip(jobs, measured)]
    summary = {}
    for name in configs:
        mine = [r for r in rows if r["config"] == name]
        tokens = sum(r["tokens"] for r in mine)
        ms = sum(r["generation_ms"] for r in mine)
        summary[name] = {"tokens": tokens, "tokens_per_s": tokens / (ms / 1000) if ms else None,
                         "num_drafts": sum(r["num_drafts"] or 0 for r in mine),
                         "num_accepted_tokens": sum(r["num_accepted_tokens"] or 0 for r in mine),
                         "wall_ms": walls[name],
                         "throughput_tokens_per_s": tokens / (walls[name] / 1000) if walls[name] else None}
    spec, plain = summary.get("speculative", {}), summary.get("plain", {})
    speedup = (spec["tokens_per_s"] / plain["tokens_per_s"]
               if spec.get("tokens_per_s") and plain.get("tokens_per_s") else None)
    from specchat.redact import redact_url

    return {"profile": profile.name, "url": redact_url(profile.target.url),
            "plain_url": plain_url and redact_url(plain_url), "concurrency": concurrency, "rows": rows,
            "summary": summary, "measured_speedup": speedup}


def table(results: dict[str, Any]) -> str:
    lines = [f"{'config':<12} {'tokens':>7} {'tok/s':>8} {'drafts':>7} {'accepted':>9}"]
    for name, s in results["summary"].items():
        tps = "–" if s["tokens_per_s"] is None else f"{s['tokens_per_s']:.1f}"
        lines.append(f"{name:<12} {s['tokens']:>7} {tps:>8} {s['num_drafts']:>7} {s['num_accepted_tokens']:>9}")
    speedup = results["measured_speedup"]
    lines.append("measured speed-up (speculative / plain): " + ("– (no plain server)" if speedup is None
                                                              else f"{speedup:.2f}×"))
    if results.get("concurrency", 1) > 1:
        rates = ", ".join(f"{name} " + ("–" if s.get("throughput_tokens_per_s") is None
                                        else f"{s['throughput_tokens_per_s']:.1f}")
                          for name, s in results["summary"].items())
        lines.append(f"{results['concurrency']} streams at once, tokens/s over the wall time: {rates}")
    return "\n".join(lines)


def write(out_dir: Path, results: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    return path

