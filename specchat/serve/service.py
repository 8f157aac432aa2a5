"""What ``specchat serve`` holds while it runs (the batched engine's worker, the chat template,
the profile's defaults, the counters), and the checks of a profile and ``--parallel N`` that
refuse in one line before the model loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specchat.engine.batch.server import BatchedServer, Handle
from specchat.engine.batch.batched import BatchedEngine, Request
from specchat.engine.batch.lanes import LaneProposers, check_batchable
from specchat.engine.factory import sampling_params
from specchat.engine.sampling import SamplingParams
from specchat.engine.template import ChatTemplate
from specchat.errors import SpecchatError
from specchat.serve.metrics import ServeMetrics
from specchat.serve.openai import BadRequest, Job

MIN_ROOM = 256  # tokens a chat holds at least (build_service's floor)


@dataclass
class Service:
    batch: BatchedServer
    chat: ChatTemplate  # the profile's chat template, system prompt and end-of-turn tokens
    model: str  # the name /v1/models lists and responses carry
    defaults: SamplingParams  # the profile's sampling, for fields a request leaves out
    max_new_tokens: int
    room: int  # tokens one sequence holds: prompt and reply together
    num_spec_tokens: int  # the most drafts a step proposes (0: plain decoding)
    metrics: ServeMetrics
    api_key: str | None = None

    def prompt_ids(self, job: Job) -> list[int]:
        if job.kind == "completion":
            return self.chat.tokenizer.encode(job.prompt)
        try:  # the profile's system prompt, unless the client sent one
            return self.chat.prompt_ids(job.messages)
        except Exception as exc:  # a template that raises on these messages (roles out of order)
            raise BadRequest(f"the chat template refused these messages ({type(exc).__name__})") from None

    def start(self, job: Job) -> tuple[Handle, list[int]]:
        """Submits ``job`` → (its handle, its prompt's ids); BadRequest when the prompt
        leaves no room for a reply in one sequence's context."""
        ids = self.prompt_ids(job)
        if not ids or len(ids) >= self.room:
            raise BadRequest(f"the prompt is {len(ids)} tokens; each request holds at most {self.room} tokens "
                             f"(prompt and reply) here — shorten it, or serve with a smaller --parallel")
        self.metrics.add_prompt(len(ids))
        return self.batch.submit(Request(ids, job.params, job.max_tokens)), ids  # end of turn: the engine's eos

    def close(self) -> None:
        self.batch.close()


def check_profile(profile: Any, parallel: int) -> None:
    """One line, exit 2, for a profile the batched engine cannot serve (before loading it)."""
    if profile.target.backend != "llama.cpp":
        raise SpecchatError(f"serve runs llama.cpp (GGUF) profiles only, not target.backend = "
                            f"'{profile.target.backend}'", key="target.backend",
                            hint="use a profile with backend = \"llama.cpp\" (the default profile is one)")
    check_batchable(profile.speculation, "serve")
    if parallel < 1:
        raise SpecchatError(f"--parallel {parallel} is not valid", key="--parallel", hint="use a whole number ≥ 1")


def build_service(profile: Any, loaded: Any, parallel: int, api_key: str | None = None) -> Service:
    """The profile's models → a running Service (its worker thread started)."""
    check_profile(profile, parallel)
    spec = profile.speculation
    room = max(MIN_ROOM, loaded.target.max_length // parallel)
    gamma = spec.num_speculative_tokens
    num_spec_tokens = 0 if spec.method == "none" else spec.max_speculative_tokens if gamma == "auto" else int(gamma)
    factory = LaneProposers(spec, loaded)  # one proposer per sequence
    chat = ChatTemplate.of(profile, loaded.tokenizer)
    metrics = ServeMetrics(profile.name)
    engine = BatchedEngine(loaded.target, parallel, factory, chat.stop_token_ids, n_ctx_per_seq=room)
    return Service(BatchedServer(engine, metrics.add_step), chat, profile.name, sampling_params(profile.sampling),
                   profile.sampling.max_new_tokens, room, num_spec_tokens, metrics, api_key)


def check_parallel(parallel: int, n_ctx: int | None) -> None:
    """One line, exit 2, for an N no batched context can hold (before the model loads;
    N < 1 is check_profile's)."""
    import llama_cpp

    most = int(llama_cpp.llama_max_parallel_sequences())
    if parallel > most:
        raise too_many(parallel, n_ctx, f"llama.cpp batches at most {most} sequences in one context", most)


def too_many(parallel: int, n_ctx: int | None, why: str, fits: int | None = None) -> SpecchatError:
    """The error for ``--parallel N`` that llama.cpp cannot batch: why, each chat's share
    of n_ctx, and the largest N that fits (``fits``; by default the largest whose
    batched context is no larger than the target's own n_ctx)."""
    share = (f"each chat would get {n_ctx // parallel} tokens (n_ctx {n_ctx} / {parallel})" if n_ctx
             else f"each chat would get 1/{parallel} of the target's context")
    if fits is None:
        fits = max(1, (n_ctx or MIN_ROOM) // MIN_ROOM)
    return SpecchatError(f"--parallel {parallel} is more chats than fit: {why}; {share}", key="--parallel",
                         hint=f"use --parallel {fits} or fewer")
