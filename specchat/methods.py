"""The one table of speculation methods, read by config, the factory, the loader, bench, serve and
the UI (a new proposer: its module, a row, its tests; a head's module too); the servers' names."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

REMOTE_BACKENDS = ("llama-server", "vllm")  # they run the model and speculate themselves


@dataclass(frozen=True)
class Method:
    name: str  # the profile's speculation.method, bench's --methods and its drafts' Token.source
    label: str  # the panel's rows per proposer (≤ 7 characters)
    title: str  # the token inspector's "drafted by …"
    needs: str = ""  # beside the target: "draft" (a draft model), a head's kind, or ""
    point_mass: bool = False  # its drafts carry no q
    tree: bool = False  # it drafts a tree when speculation.siblings > 1
    batched: bool = False  # llama.cpp's batched engine (serve, bench --concurrency) runs its chains
    aliases: tuple[str, ...] = ()  # other spellings bench's --methods accepts
    auto_only: bool = False  # its controller picks the source and γ each step: γ = auto only
    # "module:Class" of its proposer, built from (γ, n-gram bounds, γ = auto ceiling) or with ``head`` from
    # (head, target, γ, ceiling, tree), and of its head (a heads.checkpoint.Head of kind ``needs``)
    builds: str = ""
    head: str = ""


def named(dotted: str):
    """The class a row names as "module:Class", imported on first use (the table stays torch-free)."""
    module, name = dotted.split(":")
    return getattr(importlib.import_module(module), name)


METHODS = {m.name: m for m in (
    Method("draft_model", "draft", "draft model", needs="draft", batched=True, aliases=("draft",)),
    Method("ngram", "n-gram", "n-gram lookup", point_mass=True, batched=True,
           builds="specchat.engine.proposers.base:NgramProposer"),
    Method("suffix", "suffix", "suffix decoding", point_mass=True, batched=True,
           builds="specchat.engine.proposers.suffix:SuffixProposer"),
    Method("eagle3", "head", "EAGLE-3 head", needs="eagle3", tree=True, batched=True,
           head="specchat.heads.eagle3:Eagle3Head", builds="specchat.engine.proposers.eagle:EagleProposer"),
    Method("medusa", "medusa", "Medusa heads", needs="medusa", tree=True, head="specchat.heads.medusa:MedusaHead",
           builds="specchat.engine.proposers.medusa:MedusaProposer"),
    Method("hybrid", "hybrid", "n-gram lookup or EAGLE-3 head", needs="eagle3", tree=True, batched=True,
           auto_only=True, head="specchat.heads.eagle3:Eagle3Head"),
    Method("ngram_draft", "n+draft", "n-gram lookup or draft model", needs="draft", batched=True, auto_only=True),
    Method("none", "none", "no proposer", batched=True),
)}
SPELLINGS = {spelling: m for m in METHODS.values() for spelling in (m.name, *m.aliases)}

