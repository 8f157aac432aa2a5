"""What ``specchat models list`` shows: every GGUF specchat can name as a source (pulled,
Ollama's, LM Studio's, the Hugging Face cache's), its size, and which of them can draft
for which: a smaller model whose tokenizer is the same (gguf_meta.py's fingerprint)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import stores
from .catalog import PULLS
from .gguf_meta import GgufInfo, read_info
from .pull import is_pulled, pulled_path


@dataclass(frozen=True)
class Found:
    where: str  # pulled, ollama, lmstudio, hf-cache
    source: str  # what a profile's source (and gguf_file) says
    path: Path
    size: int
    info: GgufInfo | None
    problem: str | None = None  # why its header could not be read
    note: str = ""


def find_all() -> list[Found]:
    places = [("pulled", f"pulled:{entry.name}", pulled_path(entry.name), "")
              for pull in PULLS.values() for entry in pull.files if is_pulled(entry)]
    places += [("ollama", source, blob, "carries a draft layer" if has_draft else "")
               for source, blob, has_draft in stores.ollama_models()]
    places += [("lmstudio", source, path, "") for source, path in stores.lmstudio_models()]
    places += [("hf-cache", source, path, "") for source, path in stores.hf_cache_models()]
    found = []
    for where, source, path, note in places:
        try:
            info, problem = read_info(path), None
        except (OSError, ValueError) as error:
            info, problem = None, str(error)
        found.append(Found(where, source, path, path.stat().st_size, info, problem, note))
    return found


def draft_candidates(found: list[Found]) -> dict[str, list[Found]]:
    """For each model, the smaller ones with the same tokenizer, smallest first."""
    out: dict[str, list[Found]] = {}
    for target in found:
        if target.info is None or not target.info.tokenizer:
            continue
        drafts = [d for d in found if d is not target and d.info is not None
                  and d.info.tokenizer == target.info.tokenizer and d.size < target.size]
        if drafts:
            out[target.source] = sorted(drafts, key=lambda d: d.size)
    return out
