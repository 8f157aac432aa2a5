"""Peer rows for a llama.cpp target: llama-cpp-python's own generation on the same GGUF,
and the llama-server rows (peer_llama_server.py). Design notes: docs/design/bench.md"""

from __future__ import annotations

import time
from typing import Any

from specchat.bench import memory
from specchat.bench.peer import clip_emissions
from specchat.bench.row import BenchRow


LOOKUP_MAX_CTX = 4096


class LlamaCppPeerRunner:
    def __init__(self, loaded: Any, speculation: Any, stops: set[int], head_peer: Any = None) -> None:
        self.head_peer = head_peer  # llama-server's rows: plain, and peer:eagle3 with the same head
        target = loaded.target
        self.model_path = target.model_path
        self.settings = {"n_ctx": target.max_length, "n_threads": target.n_threads,
                         "n_threads_batch": target.n_threads, "n_gpu_layers": target.n_gpu_layers,
                         "flash_attn": target.flash_attn, "verbose": False}  # like with like
        self.speculation = speculation
        self.stops = set(stops)
        self._instances: dict[tuple[str, bool], Any] = {}

    def _llama(self, path: str, lookup: bool) -> Any:
        """One Llama per (file, prompt lookup or not): a draft model needs logits for every
        position, fixed when the context is created."""
        key = (path, lookup)
        if key not in self._instances:
            from llama_cpp import Llama
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            settings = dict(self.settings)
            draft = None
            if lookup:
                draft = LlamaPromptLookupDecoding(max_ngram_size=self.speculation.prompt_lookup_max)
                # A draft model makes Llama keep logits for every position, but 0.3.36 sizes
                # that buffer from the logits_all argument (n_batch rows unless it is set), so
                # a sequence past n_batch tokens overflows it: ask for it explicitly, and bound
                # n_ctx, since the buffer holds n_ctx × vocabulary floats.
                settings.update(logits_all=True, n_ctx=min(settings["n_ctx"], LOOKUP_MAX_CTX))
            self._instances[key] = Llama(model_path=path, draft_model=draft, **settings)
        return self._instances[key]

    def close(self) -> None:
        if self.head_peer is not None:
            self.head_peer.close()

    def run(self, config: Any, request: Any, params: Any, max_new_tokens: int) -> BenchRow:
        if config.method == "eagle3" or config.server:
            return self.head_peer.run(config, request, params, max_new_tokens)
        lookup = config.method == "ngram"
        llm = self._llama(config.model or self.model_path, lookup)
        if lookup:
            gamma = config.gamma
            llm.draft_model.num_pred_tokens = self.speculation.max_speculative_tokens if gamma == "auto" else int(gamma)
        if request.fresh:  # a follow-up turn keeps its chat's KV (generate reuses the common prefix)
            llm.reset()
        llm.set_seed(request.seed if params.seed is None else params.seed)
        out: list[int] = []
        emissions: list[list[float]] = []
        finish = "length"
        t0 = time.perf_counter()
        tokens = llm.generate(list(request.ids), temp=params.temperature, top_p=params.top_p, top_k=params.top_k,
                              min_p=0.0, repeat_penalty=1.0, reset=True)
        for token in tokens:
            emissions.append([(time.perf_counter() - t0) * 1000.0, 1])
            out.append(int(token))
            if token in self.stops:
                finish = "eos"
                break
            if len(out) >= max_new_tokens:
                break
        tokens.close()
        return BenchRow(new_tokens=len(out), finish_reason=finish, wall_ms=(time.perf_counter() - t0) * 1000.0,
                        emissions=clip_emissions(emissions, len(out)), output_ids=out, rss_bytes=memory.rss_bytes())
