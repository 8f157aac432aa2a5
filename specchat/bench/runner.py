"""Runs the request set under every configuration, request-major, and records raw
per-request rows. Design notes: docs/design/bench.md"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from specchat.bench import memory
from specchat.bench.configs import WARMUP_TOKENS, BenchConfig, process_kernels, ran_kernels
from specchat.bench.prompt_sets import PromptSet
from specchat.bench.row import BenchRow
from specchat.contention import BUSY_SHARE, CpuShare

Progress = Callable[[int, int, str], None]

SEED_STRIDE = 1009  # request seeds: base + SEED_STRIDE · prompt number + repeat


@dataclasses.dataclass(frozen=True)
class Request:
    """``follow_up``: the user's next message (a multi-turn question: MT-bench's second turn),
    sent after the reply as a turn of the same chat; ``fresh`` False: this request follows
    the one before it in the same chat, so the KV of their shared prefix is kept."""

    set_name: str
    prompt_id: str
    repeat: int
    seed: int
    ids: tuple[int, ...]
    max_new_tokens: int
    messages: tuple[tuple[str, str], ...] = ()
    follow_up: str = ""
    fresh: bool = True


TURN_2 = "/turn-2"  # a multi-turn set's second turns are reported as a set of their own


def second_turn_sets(sets: list[PromptSet]) -> list[str]:
    """The names under which the sets' second turns are reported."""
    return [s.name + TURN_2 for s in sets if any(len(p.turns) > 1 for p in s.prompts)]


def second_turn(request: Request, reply_ids: list[int], chat: Any) -> Request:
    """The follow-up as the next turn of the same chat: the first question, the model's own
    reply, the second question (Spec-Bench's MT-bench runs its two turns so)."""
    reply = chat.tokenizer.decode(reply_ids, skip_special_tokens=True)
    messages = (*request.messages, ("assistant", reply), ("user", request.follow_up))
    ids = tuple(chat.prompt_ids([{"role": r, "content": c} for r, c in messages]))
    return dataclasses.replace(request, set_name=request.set_name + TURN_2, ids=ids, messages=messages,
                               follow_up="", fresh=False)


def build_requests(sets: list[PromptSet], chat: Any, repeat: int, base_seed: int,
                   max_new_tokens: int | None) -> list[Request]:
    """Prompt ids for every (prompt, repeat), templated by the profile's ChatTemplate."""
    requests = []
    number = 0
    for prompt_set in sets:
        limit = max_new_tokens or prompt_set.max_new_tokens
        for prompt in prompt_set.prompts:
            ids = tuple(chat.prompt_ids([{"role": "user", "content": prompt.text}]))
            follow_up = prompt.turns[1] if len(prompt.turns) > 1 else ""
            for r in range(repeat):
                requests.append(Request(prompt_set.name, prompt.id, r, base_seed + SEED_STRIDE * number + r, ids, limit,
                                        (("user", prompt.text),), follow_up))
            number += 1
    return requests


def make_engine(config: BenchConfig, loaded: Any, speculation: Any, params: Any = None) -> Any:
    from specchat.engine import SpeculativeEngine
    from specchat.engine.factory import build_proposer
    from specchat.engine.gamma.calibrate import calibrate

    ceiling = speculation.max_speculative_tokens if config.gamma == "auto" else config.gamma
    proposer = build_proposer(speculation, loaded, config.gamma, ceiling, config.method)
    if config.store:  # empty: it holds what this configuration replies in this run, nothing of the user's
        from specchat.engine.proposers.suffix_store import SuffixStore, tokenizer_fingerprint

        proposer.store = SuffixStore(*tokenizer_fingerprint(loaded.tokenizer))
    engine = SpeculativeEngine(loaded.target, proposer)
    calibrate(engine, params)  # as a chat is made (live.py): γ = auto knows its draft model's cost
    return engine


def run_specchat(engine: Any, request: Request, params: Any, stops: set[int], max_new_tokens: int) -> BenchRow:
    """One request through our engine → a raw row (see the module docstring)."""
    if request.fresh:
        engine.reset()
    memory.reset_peak(engine.device)
    emissions: list[list[float]] = []
    stats: list[Any] = []
    out: list[int] = []
    finish = None
    t0 = time.perf_counter()
    for step in engine.generate(list(request.ids), params, max_new_tokens, stops):
        now = (time.perf_counter() - t0) * 1000.0
        if step.tokens:
            emissions.append([now, len(step.tokens)])
            out.extend(t.id for t in step.tokens)
            stats.append(step.stats)
        finish = step.finish_reason or finish
    row = BenchRow(new_tokens=len(out), finish_reason=finish, wall_ms=(time.perf_counter() - t0) * 1000.0,
                   emissions=emissions, steps=stats, output_ids=out, draft_kv_bytes=memory.draft_kv_bytes(engine),
                   peak_gpu_bytes=memory.peak_gpu_bytes(engine.device), rss_bytes=memory.rss_bytes())
    if not request.follow_up:
        engine.reset()  # free this configuration's caches before the next one runs
    return row


def peer_kind(loaded: Any) -> str:
    """The engine a user would pick instead on this target: "llama.cpp" or "transformers"."""
    from specchat.engine.backends import as_backend

    return "llama.cpp" if as_backend(loaded.target).name == "llama.cpp" else "transformers"


PEER_METHODS = {"llama.cpp": ("none", "ngram"), "transformers": ("none", "draft_model", "ngram")}


def peer_methods(loaded: Any, profile: Any) -> tuple[tuple[str, ...], str | None]:
    """The methods the peer engine has here, and why it lacks eagle3 (None: it has it,
    or the profile has no head)."""
    kind = peer_kind(loaded)
    if kind != "llama.cpp" or loaded.head is None or loaded.head.kind != "eagle3":
        return PEER_METHODS[kind], None
    from specchat.bench.peer_llama_server import unavailable

    why = unavailable(loaded, profile)
    return PEER_METHODS[kind] + (() if why else ("eagle3",)), why


def make_peer(loaded: Any, profile: Any, stops: set[int], eagle3: bool = False, server: bool = False) -> Any:
    if peer_kind(loaded) == "llama.cpp":
        from specchat.bench.peer_llamacpp import LlamaCppPeerRunner

        server_peer = None
        if eagle3 or server:  # llama-server, plain or with the same head (peer_llama_server.py)
            from specchat.bench.peer_llama_server import LlamaServerPeer

            server_peer = LlamaServerPeer(loaded, profile, stops, loaded.head.folder if eagle3 else None)
        return LlamaCppPeerRunner(loaded, profile.speculation, stops, server_peer)
    from specchat.bench.peer import PeerRunner

    return PeerRunner(loaded, profile.speculation, stops)


def chat_requests(loaded: Any, profile: Any, sets: list[PromptSet], max_new_tokens: int | None,
                  repeat: int = 1) -> tuple[Any, list[Request]]:
    """The profile's chat template and the sets' chat-templated requests."""
    from specchat.engine.template import ChatTemplate
    from specchat.engine.factory import sampling_params

    base = sampling_params(profile.sampling)
    chat = ChatTemplate.of(profile, loaded.tokenizer)
    return chat, build_requests(sets, chat, repeat, base.seed if base.seed is not None else 0, max_new_tokens)


def run_benchmark(loaded: Any, profile: Any, sets: list[PromptSet], configs: list[BenchConfig], *,
                  repeat: int = 1, max_new_tokens: int | None = None, progress: Progress | None = None,
                  warmup: bool = True) -> dict:
    """Every request under every configuration → ``{"requests": [...], "rows": [BenchRow, ...]}``."""
    from specchat.engine.factory import sampling_params

    report = progress or (lambda done, total, text: None)
    base = sampling_params(profile.sampling)
    chat, requests = chat_requests(loaded, profile, sets, max_new_tokens, repeat)
    stops = set(chat.stop_token_ids)
    engines = {c: make_engine(c, loaded, profile.speculation, base) for c in configs if c.runner == "specchat"}
    peer = (make_peer(loaded, profile, stops, eagle3=any(c.runner == "peer" and c.method == "eagle3" for c in configs),
                      server=any(c.server for c in configs))
            if any(c.runner == "peer" for c in configs) else None)
    draft_bytes = loaded.draft.parameter_bytes() if loaded.draft is not None else 0
    kernels = process_kernels(loaded)  # ours and llama-cpp-python's; a llama-server row says its own

    def run_one(config: BenchConfig, request: Request, limit: int) -> BenchRow:
        params = dataclasses.replace(base, seed=request.seed)
        if config.runner == "peer":
            return peer.run(config, request, params, limit)
        return run_specchat(engines[config], request, params, stops, limit)

    rows, finished, stopped_early = [], 0, None  # finished: requests done under every configuration
    cpu, others_ms, timed_ms = CpuShare(), 0.0, 0.0  # other processes' share of the cores, per row
    try:
        if warmup and requests:  # first calls pay one-off costs (allocator, kernels, lazy init)
            for i, config in enumerate(configs):
                report(0, 0, f"warm-up {config.name}")
                run_one(config, requests[0], WARMUP_TOKENS)
        total = sum(1 + bool(q.follow_up) for q in requests) * len(configs)
        for r, request in enumerate(requests):
            shift = r % len(configs)
            for config in configs[shift:] + configs[:shift]:
                turn = request
                while turn is not None:  # a multi-turn question: its turns in one chat, back to back
                    report(len(rows), total, f"{turn.set_name}/{turn.prompt_id} #{turn.repeat} · {config.name}")
                    cpu.take(fresh=True)
                    row = run_one(config, turn, turn.max_new_tokens)
                    share = cpu.take(fresh=True)
                    # a server peer's own process is not a neighbour: its rows are not judged
                    if share is not None and not config.on_server:
                        others_ms += share * row.wall_ms
                        timed_ms += row.wall_ms
                    if config.store:  # a later chat may draft from this reply (never the warm-up's)
                        engines[config].proposer.store.add(row.output_ids)
                    rows.append(row.of(turn, config, config.name, max_new_tokens=turn.max_new_tokens, order=len(rows),
                                       draft_param_bytes=draft_bytes if config.method == "draft_model" else 0,
                                       cpu_others=share, kernels=ran_kernels(config, kernels)))
                    turn = second_turn(turn, row.output_ids, chat) if turn.follow_up else None
            finished = r + 1
        report(total, total, "done")
    except KeyboardInterrupt:  # keep whole requests only, so every kept row has its pairs
        if not finished:
            raise  # nothing to keep: the CLI's "interrupted"
        del rows[sum(1 + bool(q.follow_up) for q in requests[:finished]) * len(configs):]
        stopped_early = {"requests_done": finished, "requests": len(requests)}
    finally:
        if peer is not None:
            peer.close()  # a server peer's processes stop with the run, whatever ends it
    return {
        "requests": [{"set": q.set_name, "prompt_id": q.prompt_id, "repeat": q.repeat, "seed": q.seed,
                      "prompt_tokens": len(q.ids), "max_new_tokens": q.max_new_tokens} for q in requests],
        "rows": rows,
        "stopped_early": stopped_early,
        "peak_rss_bytes": memory.peak_rss_bytes(),
        "cpu_others": others_ms / timed_ms if timed_ms else None,
        "busy_machine": (others_ms / timed_ms > BUSY_SHARE) if timed_ms else None,
    }
