"""The peer row: transformers' own assisted generation on the same models and prompts.
Design notes: docs/design/bench.md"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from specchat.bench import memory
from specchat.bench.row import BenchRow

ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


class _StampingStreamer:
    """Records ``[t_ms, n_tokens]`` for every chunk ``generate`` emits after the prompt."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.emissions: list[list[float]] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # the first put is the prompt itself
            self._prompt_seen = True
            return
        self.emissions.append([(time.perf_counter() - self.t0) * 1000.0, int(value.numel())])

    def end(self) -> None:
        pass


class PeerRunner:
    def __init__(self, loaded: Any, speculation: Any, stops: set[int]) -> None:
        # transformers' own assisted generation drives the models themselves
        self.target = loaded.target.model
        self.draft = None if loaded.draft is None else loaded.draft.model
        self.speculation = speculation
        self.stops = sorted(stops)
        tokenizer = loaded.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stops[0]

    def close(self) -> None:
        """Nothing to stop: transformers runs in this process."""

    @contextlib.contextmanager
    def _assistant_settings(self, gamma: int | str):
        """Sets the draft's assisted-generation keys for one call and restores them
        (transformers reads them from the assistant's generation_config)."""
        config = self.draft.generation_config
        saved = {key: getattr(config, key, None) for key in ASSISTANT_KEYS}
        if gamma == "auto":
            values = dict.fromkeys(ASSISTANT_KEYS)  # None: transformers fills in its defaults
        else:
            values = {"num_assistant_tokens": int(gamma), "num_assistant_tokens_schedule": "constant",
                      "assistant_confidence_threshold": 0.0}
        for key, value in values.items():
            setattr(config, key, value)
        try:
            yield
        finally:
            for key, value in saved.items():
                setattr(config, key, value)

    def generate_kwargs(self, method: str, gamma: int | str, params: Any, max_new_tokens: int) -> dict:
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "eos_token_id": self.stops,
                                  "pad_token_id": self.pad_id, "do_sample": not params.greedy}
        if not params.greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        if method == "draft_model":
            kwargs["assistant_model"] = self.draft
        elif method == "ngram":
            ceiling = self.speculation.max_speculative_tokens
            kwargs["prompt_lookup_num_tokens"] = ceiling if gamma == "auto" else int(gamma)
            kwargs["max_matching_ngram_size"] = self.speculation.prompt_lookup_max
        return kwargs

    def run(self, config: Any, request: Any, params: Any, max_new_tokens: int) -> BenchRow:
        import torch

        device = self.target.device
        ids = torch.tensor([list(request.ids)], dtype=torch.long, device=device)
        kwargs = self.generate_kwargs(config.method, config.gamma, params, max_new_tokens)
        settings = self._assistant_settings(config.gamma) if config.method == "draft_model" else contextlib.nullcontext()
        memory.reset_peak(device)
        torch.manual_seed(request.seed if params.seed is None else params.seed)
        with settings, torch.inference_mode():
            t0 = time.perf_counter()
            streamer = _StampingStreamer(t0)
            sequences = self.target.generate(ids, attention_mask=torch.ones_like(ids), streamer=streamer, **kwargs)
            wall_ms = (time.perf_counter() - t0) * 1000.0
        out = sequences[0, ids.shape[1]:].tolist()
        out = out[:next((i + 1 for i, t in enumerate(out) if t in self.stops), len(out))]  # padded after eos
        finish = "eos" if out and out[-1] in self.stops else "length"
        return BenchRow(new_tokens=len(out), finish_reason=finish, wall_ms=wall_ms, output_ids=out,
                        emissions=clip_emissions(streamer.emissions, len(out)),
                        peak_gpu_bytes=memory.peak_gpu_bytes(device), rss_bytes=memory.rss_bytes())


def clip_emissions(emissions: list[list[float]], tokens: int) -> list[list[float]]:
    """Emissions trimmed so they account for exactly ``tokens`` tokens."""
    clipped, left = [], tokens
    for t, n in emissions:
        if left <= 0:
            break
        clipped.append([t, min(int(n), left)])
        left -= min(int(n), left)
    return clipped
