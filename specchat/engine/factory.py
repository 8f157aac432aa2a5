"""Profile + loaded models → a ready :class:`ChatSession`."""

from __future__ import annotations

from typing import Any

from specchat.engine.chat import ChatSession
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.proposers import DraftModelProposer, NgramProposer, Proposer
from specchat.engine.sampling import SamplingParams


def build_proposer(speculation: Any, draft_model: Any = None) -> Proposer | None:
    """The proposer a profile's ``[speculation]`` table asks for (None for plain decoding)."""
    method = speculation.method
    gamma = speculation.num_speculative_tokens
    ceiling = getattr(speculation, "max_speculative_tokens", None)
    if method == "draft_model":
        if draft_model is None:
            raise ValueError("speculation.method = 'draft_model' needs a loaded draft model")
        return DraftModelProposer(draft_model, gamma, ceiling)
    if method == "ngram":
        return NgramProposer(gamma, speculation.prompt_lookup_min, speculation.prompt_lookup_max, ceiling)
    return None


def sampling_params(sampling: Any) -> SamplingParams:
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                          seed=sampling.seed)


def build_chat(profile: Any, loaded: Any) -> ChatSession:
    proposer = build_proposer(profile.speculation, getattr(loaded, "draft", None))
    engine = SpeculativeEngine(loaded.target, proposer)
    return ChatSession(
        engine,
        loaded.tokenizer,
        sampling=sampling_params(profile.sampling),
        max_new_tokens=profile.sampling.max_new_tokens,
        system_prompt=profile.chat.system_prompt,
        enable_thinking=profile.chat.enable_thinking,
    )
