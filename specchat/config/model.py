"""Profile dataclasses: what a TOML profile means once validated.

Field names are a contract shared with the engine factory, the UI, sessions and
bench; defaults here are the documented profile defaults (docs/guide.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.methods import REMOTE_BACKENDS

DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = ("none", "8bit", "4bit-nf4", "4bit-fp4")
BACKENDS = ("transformers", "llama.cpp", *REMOTE_BACKENDS)
GGUF_TYPES = ("auto", "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K_M", "Q5_K_M", "Q6_K")
MAX_SPECULATIVE_TOKENS = 16  # γ's upper bound, everywhere one is given
MAX_SIBLINGS = 8  # a tree's nodes a depth (speculation.siblings)
MAX_TREE_NODES = MAX_SPECULATIVE_TOKENS * MAX_SIBLINGS  # drafts one step may verify


def parse_gamma(text: str) -> int | str | None:
    """γ as typed: "auto" or a whole number 1..MAX_SPECULATIVE_TOKENS; None otherwise."""
    if text == "auto":
        return text
    ok = text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_SPECULATIVE_TOKENS
    return int(text) if ok else None


@dataclass(frozen=True)
class ModelSpec:
    """One model to load; each key explained in docs/guide.md's profile reference, the backends'
    rules in docs/design/loading.md."""

    source: str = ""
    revision: str | None = None
    gguf_file: str | None = None
    dtype: str = "auto"
    quantization: str = "none"
    device: str = "auto"
    num_layers: int | None = None
    backend: str = "transformers"
    n_gpu_layers: int = 0
    n_ctx: int = 0
    n_threads: int = 0
    gguf_type: str | None = None
    url: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True)
class SpeculationSpec:
    """How tokens are proposed (``method``: a row of specchat.methods). ``num_speculative_tokens``
    is γ, or ``"auto"`` to let the engine's controller pick γ in 1..max_speculative_tokens. The
    keys of all four sections: docs/guide.md's profile reference."""

    method: str = "ngram"
    draft: ModelSpec | None = None
    num_speculative_tokens: int | str = 5
    max_speculative_tokens: int = 8
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3
    head: str | None = None
    head_revision: str | None = None
    siblings: int = 1
    tree: str = "first"
    suffix_store: str = "off"


@dataclass(frozen=True)
class SamplingSpec:
    """temperature 0 means greedy; top_k 0 and top_p 1 disable those filters."""

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_new_tokens: int = 512


@dataclass(frozen=True)
class ChatSpec:
    system_prompt: str | None = None
    enable_thinking: bool | None = None  # None: the chat template's own default
    overflow: str = "rolling"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    source_path: Path | None
    target: ModelSpec
    speculation: SpeculationSpec = field(default_factory=SpeculationSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    chat: ChatSpec = field(default_factory=ChatSpec)
    record: bool = True
    trust_remote_code: bool = False
    needs_gpu: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, for session headers and ``specchat profiles show --json``."""
        data = dataclasses.asdict(self)
        data["source_path"] = None if self.source_path is None else str(self.source_path)
        return data

    def replace(self, **sections: Any) -> "Profile":
        """Copy with some fields changed, e.g. ``profile.replace(sampling={"seed": 3})``.

        A dict value updates that section's fields; anything else replaces the field.
        """
        changes = {}
        for name, value in sections.items():
            current = getattr(self, name)
            if isinstance(value, dict) and dataclasses.is_dataclass(current):
                value = dataclasses.replace(current, **value)
            changes[name] = value
        return dataclasses.replace(self, **changes)
