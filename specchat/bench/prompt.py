"""A bench prompt and a set of them, as prompt_sets.py, spec_bench.py and humaneval.py make them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROMPTS_DIR = Path(__file__).parent / "prompts"
DEFAULT_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class Prompt:
    """``turns``: every user turn of a multi-turn question (``text`` is the first), empty for
    a one-turn prompt; ``category``: where a set mixes kinds (Spec-Bench's MT-bench), which."""

    id: str
    text: str
    turns: tuple[str, ...] = ()
    category: str = ""


@dataclass(frozen=True)
class PromptSet:
    name: str
    description: str
    max_new_tokens: int
    prompts: tuple[Prompt, ...]
    source: str
