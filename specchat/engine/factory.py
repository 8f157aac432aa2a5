"""Profile + loaded models → a ready :class:`ChatSession`."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from specchat.engine.session import ChatSession
from specchat.engine.proposers.eagle import EagleProposer
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.proposers.hybrid import HEAD_CEILING, HybridProposer
from specchat.engine.proposers.medusa import MedusaProposer
from specchat.engine.proposers import DraftModelProposer, NgramProposer, Proposer
from specchat.engine.sampling import SamplingParams
from specchat.methods import HEAD_KINDS, METHODS

if TYPE_CHECKING:
    from specchat.config.model import SpeculationSpec


def build_proposer(speculation: SpeculationSpec, loaded: Any = None, gamma: int | str | None = None,
                   ceiling: int | None = None, method: str | None = None) -> Proposer | None:
    """The proposer a profile's ``[speculation]`` table asks for (None for plain decoding),
    over ``loaded``'s models (a LoadedModels: ``draft`` and ``head`` always there, None when
    not loaded); ``gamma`` / ``method`` override the profile's (bench, verify),
    ``ceiling`` the γ = auto ceiling (default: the profile's)."""
    method = METHODS[method or speculation.method]
    gamma = speculation.num_speculative_tokens if gamma is None else gamma
    ceiling = ceiling or speculation.max_speculative_tokens
    model = None if loaded is None else loaded.draft if method.needs == "draft" else loaded.head
    if method.needs and (model is None or method.needs in HEAD_KINDS and model.kind != method.needs):
        raise ValueError(f"speculation.method = '{method.name}' needs a loaded {method.needs!r}")
    tree = {"siblings": speculation.siblings, "tree": speculation.tree}
    if method.name == "draft_model":
        return DraftModelProposer(model, gamma, ceiling)
    if method.builds:  # model-free: the table names its class
        module, name = method.builds.split(":")
        return getattr(importlib.import_module(module), name)(
            gamma, speculation.prompt_lookup_min, speculation.prompt_lookup_max, ceiling)
    if method.name == "medusa":
        return MedusaProposer(model, loaded.target, gamma, ceiling, **tree)
    if method.name == "eagle3":
        return EagleProposer(model, loaded.target, gamma, ceiling, **tree)
    if method.name == "hybrid":
        ngram = NgramProposer("auto", speculation.prompt_lookup_min, speculation.prompt_lookup_max, ceiling)
        return HybridProposer(ngram, EagleProposer(model, loaded.target, "auto", HEAD_CEILING, **tree), ceiling)
    return None


def sampling_params(sampling: Any) -> SamplingParams:
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                          seed=sampling.seed)


def build_chat(profile: Any, loaded: Any) -> ChatSession:
    proposer = build_proposer(profile.speculation, loaded)
    engine = SpeculativeEngine(loaded.target, proposer)
    return ChatSession(
        engine,
        loaded.tokenizer,
        sampling=sampling_params(profile.sampling),
        max_new_tokens=profile.sampling.max_new_tokens,
        system_prompt=profile.chat.system_prompt,
        enable_thinking=profile.chat.enable_thinking,
        overflow=profile.chat.overflow,
    )
