"""Profile + loaded models → a ready :class:`ChatSession`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specchat.engine.session import ChatSession
from specchat.engine.proposers.eagle import EagleProposer
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.proposers.hybrid import HEAD_CEILING, HybridProposer, NgramDraftProposer
from specchat.engine.proposers import DraftModelProposer, NgramProposer, Proposer
from specchat.engine.sampling import SamplingParams
from specchat.methods import METHODS, named

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
    if method.needs and (model is None or method.head and model.kind != method.needs):
        raise ValueError(f"speculation.method = '{method.name}' needs a loaded {method.needs!r}")
    tree = {"siblings": speculation.siblings, "tree": speculation.tree}
    if method.name == "draft_model":
        return DraftModelProposer(model, gamma, ceiling)
    if method.builds and method.head:  # head-based: the table names its class
        return named(method.builds)(model, loaded.target, gamma, ceiling, **tree)
    if method.builds:  # model-free
        return named(method.builds)(gamma, speculation.prompt_lookup_min, speculation.prompt_lookup_max, ceiling)
    if method.name in ("hybrid", "ngram_draft"):
        ngram = NgramProposer("auto", speculation.prompt_lookup_min, speculation.prompt_lookup_max, ceiling)
        if method.name == "hybrid":
            return HybridProposer(ngram, EagleProposer(model, loaded.target, "auto", HEAD_CEILING, **tree), ceiling)
        return NgramDraftProposer(ngram, DraftModelProposer(model, "auto", ceiling), ceiling)
    return None


def sampling_params(sampling: Any) -> SamplingParams:
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                          seed=sampling.seed)


def build_chat(profile: Any, loaded: Any, recorded: Any = None, record: bool = True) -> ChatSession:
    """A chat over ``loaded``, with the profile's suffix store in chats only (bench, verify
    and plan figures must not depend on what this user chatted before). ``recorded``: a
    model's source → its recorded replies, what a missing "auto" store is built from.
    ``record``: False (``--no-record``) drafts from the store but leaves its file as it was.
    Raises SuffixStoreError (one line) for a named store that is damaged or another tokenizer's."""
    proposer = build_proposer(profile.speculation, loaded)
    store = None
    if proposer is not None and proposer.kind == "suffix":
        from specchat.engine.proposers.suffix_store_open import open_store

        base = profile.source_path.parent if profile.source_path else None
        store = open_store(profile.speculation.suffix_store, loaded.tokenizer, profile.target.source, base, recorded,
                           keep=record and profile.record)  # a chat not recorded keeps no replies
        proposer.store = store.store if store else None
    engine = SpeculativeEngine(loaded.target, proposer)
    return ChatSession(
        engine,
        loaded.tokenizer,
        sampling=sampling_params(profile.sampling),
        max_new_tokens=profile.sampling.max_new_tokens,
        system_prompt=profile.chat.system_prompt,
        enable_thinking=profile.chat.enable_thinking,
        overflow=profile.chat.overflow,
        suffix_store=store,
    )
