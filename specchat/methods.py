"""The one table of speculation methods, read by config, the factory, bench, serve and the UI
(a new model-free proposer: a module, a row, its tests); and the server backends' names."""

from __future__ import annotations

from dataclasses import dataclass

REMOTE_BACKENDS = ("llama-server", "vllm")  # they run the model and speculate themselves
HEAD_KINDS = ("eagle3", "medusa")  # a loaded head's ``kind``


@dataclass(frozen=True)
class Method:
    name: str  # the profile's speculation.method, bench's --methods and its drafts' Token.source
    label: str  # the panel's rows per proposer (≤ 7 characters)
    title: str  # the token inspector's "drafted by …"
    needs: str = ""  # beside the target: "draft" (a draft model), a head of HEAD_KINDS, or ""
    point_mass: bool = False  # its drafts carry no q
    tree: bool = False  # it drafts a tree when speculation.siblings > 1
    batched: bool = False  # llama.cpp's batched engine (serve, bench --concurrency) runs its chains
    aliases: tuple[str, ...] = ()  # other spellings bench's --methods accepts
    auto_only: bool = False  # its controller picks the source and γ each step: γ = auto only
    # a model-free proposer's class ("module:Class", built like prompt lookup: γ, the n-gram
    # bounds, the γ = auto ceiling): the factory needs no line of its own for it
    builds: str = ""


METHODS = {m.name: m for m in (
    Method("draft_model", "draft", "draft model", needs="draft", batched=True, aliases=("draft",)),
    Method("ngram", "n-gram", "n-gram lookup", point_mass=True, batched=True,
           builds="specchat.engine.proposers.base:NgramProposer"),
    Method("suffix", "suffix", "suffix decoding", point_mass=True, batched=True,
           builds="specchat.engine.proposers.suffix:SuffixProposer"),
    Method("eagle3", "head", "EAGLE-3 head", needs="eagle3", tree=True, batched=True),
    Method("medusa", "medusa", "Medusa heads", needs="medusa", tree=True),
    Method("hybrid", "hybrid", "n-gram lookup or EAGLE-3 head", needs="eagle3", tree=True, batched=True,
           auto_only=True),
    Method("ngram_draft", "n+draft", "n-gram lookup or draft model", needs="draft", batched=True, auto_only=True),
    Method("none", "none", "no proposer", batched=True),
)}
SPELLINGS = {spelling: m for m in METHODS.values() for spelling in (m.name, *m.aliases)}

