"""A benchmark's row: one request under one configuration, as the local and concurrency
benches measure it and their statistics, reports and results.json read it."""

from __future__ import annotations

import dataclasses
from typing import Any

from specchat.events import StepStats

# the fields only one bench fills (local: order…, concurrency: run…), left out of the other's rows
ONE_BENCH = frozenset({"max_new_tokens", "order", "draft_param_bytes", "run", "concurrency", "index", "start_ms"})


@dataclasses.dataclass
class BenchRow:
    """Times in ms; ``emissions`` [[ms since the request was sent, tokens], ...]; ``steps``
    our engine's StepStats (none for a peer; llama-server's own counters instead). A field
    of ONE_BENCH the other bench does not fill stays None, left out of results.json."""

    set: str = ""
    prompt_id: str = ""
    repeat: int = 0
    seed: int | None = None
    config: str = ""
    runner: str = "specchat"
    method: str = "none"
    gamma: int | str | None = None
    prompt_tokens: int = 0
    max_new_tokens: int | None = None
    order: int | None = None
    draft_param_bytes: int | None = None
    run: int | None = None
    concurrency: int | None = None
    index: int | None = None
    new_tokens: int = 0
    finish_reason: str | None = None
    start_ms: float | None = None
    wall_ms: float = 0.0
    emissions: list[list[float]] = dataclasses.field(default_factory=list)
    steps: list[StepStats] = dataclasses.field(default_factory=list)
    output_ids: list[int] = dataclasses.field(default_factory=list)
    draft_kv_bytes: int | None = None
    peak_gpu_bytes: int | None = None
    rss_bytes: int | None = None
    server_drafted: int | None = None
    server_accepted: int | None = None
    cpu_others: float | None = None
    kernels: str | None = None  # whose llama.cpp kernels ran it: "specchat" or "stock" (configs.ran_kernels)

    def of(self, request: Any, config: Any, name: str, **more: Any) -> BenchRow:
        """This measurement labelled with its request and configuration (shown as ``name``)."""
        return dataclasses.replace(self, set=request.set_name, prompt_id=request.prompt_id, repeat=request.repeat,
                                   seed=request.seed, config=name, runner=config.runner, method=config.method,
                                   gamma=config.gamma, prompt_tokens=len(request.ids), **more)

    def to_dict(self) -> dict[str, Any]:
        """The row as results.json holds it."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["steps"] = [dataclasses.asdict(s) for s in self.steps]
        return {k: v for k, v in out.items() if v is not None or k not in ONE_BENCH}
