"""``bench --concurrency 1,2,4,8``: N chats at once, decoded together (engine/batch/batched.py),
against llama-server ``-np N`` (peer_server_concurrent.py). Design notes: docs/design/bench.md"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from specchat.bench.configs import WARMUP_TOKENS, BenchConfig, process_kernels, ran_kernels
from specchat.bench.prompt_sets import PromptSet
from specchat.bench.row import BenchRow
from specchat.bench.runner import SEED_STRIDE, Progress, Request, chat_requests, make_engine, run_specchat
from specchat.contention import BUSY_SHARE, CpuShare
from specchat.errors import SpecchatError
from specchat.methods import METHODS

MAX_SEQUENCES = 256  # llama.cpp's limit on sequences in one context (LLAMA_MAX_SEQ)


def parse_levels(text: str) -> list[int]:
    parts = [p.strip() for p in str(text).split(",")]
    for part in parts:
        if not (part.isascii() and part.isdigit()) or int(part) < 1:  # '²' is a digit to isdigit, not to int
            raise SpecchatError(f"--concurrency value {part!r} is not valid", key="--concurrency",
                                hint="give a comma-separated list of whole numbers ≥ 1, e.g. 1,2,4,8")
    return sorted({int(p) for p in parts})


def check_context(levels: list[int], requests: list[Request], n_ctx: int) -> int:
    """The context each sequence needs (its longest prompt and reply); one line and exit 2
    when the largest level's sequences do not fit the target's context together, or are
    more than llama.cpp holds in one context."""
    need = max(len(r.ids) + r.max_new_tokens for r in requests) + 1
    top = max(levels)
    if top * need > n_ctx:
        raise SpecchatError(f"--concurrency {top} needs {top} sequences × {need} tokens = {top * need} context "
                            f"tokens, more than the target's context of {n_ctx}", key="--concurrency",
                            hint=f"use at most {max(1, n_ctx // need)} here, fewer --max-new-tokens, or a profile "
                                 "with a larger target context")
    if top > MAX_SEQUENCES:
        raise SpecchatError(f"--concurrency {top} is more sequences than llama.cpp decodes together "
                            f"({MAX_SEQUENCES})", key="--concurrency", hint=f"use at most {MAX_SEQUENCES}")
    return need


def run_requests(requests: list[Request], n: int, repeat: int) -> list[Request]:
    """A run's requests: the set's prompts in turn until there are max(prompts, 2n), each
    with its own seed (the same for every configuration of the run)."""
    count, p = max(len(requests), 2 * n), len(requests)
    return [dataclasses.replace(requests[j % p], repeat=repeat, seed=requests[j % p].seed + repeat + SEED_STRIDE * p * (j // p))
            for j in range(count)]


def run_batched(engine: Any, requests: list[Request], params_for: Callable[[Request], Any], stops: set[int]
                ) -> tuple[list[BenchRow], float]:
    """Every request through our batched engine → (rows in request order, run wall ms)."""
    from specchat.engine.batch.batched import Request as Job

    engine.reset()
    jobs = [Job(list(r.ids), params_for(r), r.max_new_tokens, tuple(stops)) for r in requests]
    starts: dict[int, float] = {}
    rows = [BenchRow() for _ in requests]
    t0 = time.perf_counter()
    admitted = lambda i: starts.setdefault(i, (time.perf_counter() - t0) * 1000.0)  # noqa: E731
    for i, step in engine.generate(jobs, admitted):
        row = rows[i]
        if step.tokens:
            row.emissions.append([(time.perf_counter() - t0) * 1000.0 - starts[i], len(step.tokens)])
            row.output_ids += [t.id for t in step.tokens]
            row.steps.append(step.stats)
        row.finish_reason = step.finish_reason or row.finish_reason
    wall = (time.perf_counter() - t0) * 1000.0
    for i, row in enumerate(rows):
        row.new_tokens, row.start_ms = len(row.output_ids), starts[i]
        row.wall_ms = row.emissions[-1][0] if row.emissions else 0.0
    return rows, wall


def run_single(engine: Any, requests: list[Request], params_for: Callable[[Request], Any], stops: set[int]
               ) -> tuple[list[BenchRow], float]:
    """One request after another through the one-sequence engine (N = 1's reference)."""
    rows, t0 = [], time.perf_counter()
    for r in requests:
        start = (time.perf_counter() - t0) * 1000.0
        rows.append(dataclasses.replace(run_specchat(engine, r, params_for(r), stops, r.max_new_tokens), start_ms=start))
    return rows, (time.perf_counter() - t0) * 1000.0


def level_configs(methods: list[str], gammas: list, server: bool, single: bool) -> list[BenchConfig]:
    """Ours: plain and each method a batch runs (methods.py) at each γ;
    the same through the one-sequence engine at N = 1 (``single``: the figures a batch of
    one must keep); llama-server's plain and n-gram rows when it is built and wanted."""
    configs = [BenchConfig("none")] + [BenchConfig(m, g) for m in methods if m != "none" and METHODS[m].batched for g in gammas]
    if single:
        configs += [dataclasses.replace(c, runner="single") for c in configs]
    if server:
        configs += [BenchConfig("none", runner="peer", server=True), BenchConfig("ngram", "auto", "peer", server=True)]
    return configs


def config_name(config: BenchConfig) -> str:
    if config.runner == "single":
        return f"{dataclasses.replace(config, runner='specchat').name} (one sequence)"
    return config.name


def run_concurrency(loaded: Any, profile: Any, sets: list[PromptSet], configs: list[BenchConfig], levels: list[int], *,
                    repeat: int = 1, max_new_tokens: int | None = None, progress: Progress | None = None,
                    warmup: bool = True) -> dict:
    """Every level, set, repeat and configuration → {"runs", "rows" (BenchRow), "cpu_others", "busy_machine"}."""
    from specchat.engine.batch.batched import BatchedEngine
    from specchat.engine.batch.lanes import LaneProposers
    from specchat.engine.factory import sampling_params

    report = progress or (lambda done, total, text: None)
    base = sampling_params(profile.sampling)
    spec = profile.speculation
    chat, requests = chat_requests(loaded, profile, sets, max_new_tokens)
    stops = set(chat.stop_token_ids)
    need = check_context(levels, requests, loaded.target.max_length)
    params_for = lambda r: dataclasses.replace(base, seed=r.seed)  # noqa: E731
    kernels = process_kernels(loaded)  # ours; a llama-server row says its own (ran_kernels)
    peer = None
    if any(c.runner == "peer" for c in configs):
        from specchat.bench.peer_server_concurrent import ConcurrentServerPeer

        peer = ConcurrentServerPeer(loaded, profile, stops)

    def factory(config: BenchConfig) -> LaneProposers:  # a proposer per sequence
        ceiling = spec.max_speculative_tokens if config.gamma == "auto" else int(config.gamma)
        return LaneProposers(spec, loaded, config.gamma, ceiling, config.method)

    runs: list[dict] = []
    rows: list[BenchRow] = []
    cpu, others_ms, timed_ms = CpuShare(), 0.0, 0.0
    total = sum(len(sets) * repeat * sum(c.runner != "single" or n == 1 for c in configs) for n in levels)
    try:
        for n in levels:
            engines = {c: BatchedEngine(loaded.target, n, factory(c), stops, n_ctx_per_seq=need)
                       for c in configs if c.runner == "specchat"}
            here = [c for c in configs if c.runner != "single" or n == 1]
            singles = {c: make_engine(dataclasses.replace(c, runner="specchat"), loaded, spec)
                       for c in here if c.runner == "single"}

            def run_one(config: BenchConfig, batch: list[Request]) -> tuple[list[BenchRow], float]:
                if config.runner == "peer":
                    return peer.run(config.method, batch, params_for, n)
                if config.runner == "single":
                    return run_single(singles[config], batch, params_for, stops)
                return run_batched(engines[config], batch, params_for, stops)

            try:
                if warmup:
                    for config in here:
                        report(len(runs), total, f"warm-up N={n} {config_name(config)}")
                        short = [dataclasses.replace(r, max_new_tokens=WARMUP_TOKENS) for r in requests[:1] * n]
                        run_one(config, short)
                turn = 0  # configurations in an order rotated by one each run
                for prompt_set in sets:
                    mine = [r for r in requests if r.set_name == prompt_set.name]
                    for rep in range(repeat):
                        batch = run_requests(mine, n, rep)
                        shift, turn = turn % len(here), turn + 1
                        for config in here[shift:] + here[:shift]:
                            name = config_name(config)
                            report(len(runs), total, f"N={n} {prompt_set.name} #{rep} · {name}")
                            cpu.take(fresh=True)
                            got, wall = run_one(config, batch)
                            share = cpu.take(fresh=True)
                            if share is not None and config.runner != "peer":  # a server is not a neighbour
                                others_ms, timed_ms = others_ms + share * wall, timed_ms + wall
                            run_id = len(runs)
                            runs.append({"run": run_id, "concurrency": n, "set": prompt_set.name, "repeat": rep,
                                         "config": name, "runner": config.runner, "method": config.method,
                                         "gamma": config.gamma, "wall_ms": wall, "cpu_others": share,
                                         "tokens": sum(r.new_tokens for r in got), "requests": len(got)})
                            rows += [row.of(request, config, name, run=run_id, concurrency=n, index=j,
                                            kernels=ran_kernels(config, kernels))
                                     for j, (request, row) in enumerate(zip(batch, got))]
            finally:
                for engine in engines.values():
                    engine.close()
        report(total, total, "done")
    finally:
        if peer is not None:
            peer.close()
    return {"runs": runs, "rows": rows, "cpu_others": others_ms / timed_ms if timed_ms else None,
            "busy_machine": (others_ms / timed_ms > BUSY_SHARE) if timed_ms else None}
