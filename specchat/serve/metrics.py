"""Server-wide counters for ``GET /metrics``, in Prometheus text under vLLM's names and
``model_name`` label, so remote/metrics.py and dashboards made for vLLM read them unchanged."""

from __future__ import annotations

import threading

from specchat.events import DraftCounts, Step
from specchat.serve.reply import FINISH


class ServeMetrics:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
        self._lock = threading.Lock()  # the worker adds steps while handlers add prompts and read
        self.drafts = DraftCounts()
        self.prompt_tokens = self.generation_tokens = 0
        self.finished: dict[str, int] = {}

    def add_prompt(self, tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += tokens

    def add_step(self, index: int, step: Step) -> None:
        with self._lock:
            self.generation_tokens += len(step.tokens)
            self.drafts.add(step.stats)
            if step.finish_reason:
                reason = FINISH.get(step.finish_reason, "stop")
                self.finished[reason] = self.finished.get(reason, 0) + 1

    def render(self, running: int) -> str:
        label = f'model_name="{self.model_name}"'
        with self._lock:
            d = self.drafts
            counters = [
                ("vllm:spec_decode_num_drafts_total", "Steps that verified at least one draft.", [("", d.num_drafts)]),
                ("vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.", [("", d.num_draft_tokens)]),
                ("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", [("", d.num_accepted_tokens)]),
                ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "Steps whose draft at this position was accepted.",
                 [(f',position="{i}"', c) for i, c in enumerate(d.accepted_per_position)]),
                ("vllm:prompt_tokens_total", "Prompt tokens.", [("", self.prompt_tokens)]),
                ("vllm:generation_tokens_total", "Generated tokens.", [("", self.generation_tokens)]),
                ("vllm:request_success_total", "Requests finished, by finish reason.",
                 [(f',finished_reason="{r}"', c) for r, c in sorted(self.finished.items())]),
            ]
        lines = []
        for name, help_text, samples in counters:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            lines += [f"{name}{{{label}{extra}}} {float(value)}" for extra, value in samples]
        lines += ["# HELP vllm:num_requests_running Requests submitted and not finished.",
                  "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{label}}} {float(running)}"]
        return "\n".join(lines) + "\n"
