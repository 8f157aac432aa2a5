"""Sources that name a GGUF another tool keeps, resolved read-only to one file: ``pulled:NAME``,
``ollama:NAME[:TAG]`` (``ollama-draft:`` its draft layer), ``lmstudio:PUBLISHER/REPO[/FILE.gguf]``.
A manifest's digests must be sha256 hex and its names plain path parts: nothing it says
can point outside the store. And what ``models list`` shows: every GGUF these name (and the
Hugging Face cache's), and which can draft for which (gguf_meta.py's tokenizer fingerprint)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import untrusted
from ..errors import ModelLoadError
from .catalog import PULLS
from .gguf_meta import GgufInfo, read_info
from .pull import is_pulled, pulled_path

PREFIXES = ("pulled:", "ollama:", "ollama-draft:", "lmstudio:")
MODEL_LAYER = "application/vnd.ollama.image.model"
DRAFT_LAYER = "application/vnd.ollama.image.draft"
OLLAMA_HOST = "registry.ollama.ai"
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")


def is_store_source(source: str) -> bool:
    return source.startswith(PREFIXES)


def resolve(source: str, key: str) -> Path:
    """The GGUF file ``source`` names; a one-line ModelLoadError when it is not there."""
    scheme, _, name = source.partition(":")
    if scheme == "pulled":
        return _pulled(name, key)
    if scheme in ("ollama", "ollama-draft"):
        return ollama_layer(name, DRAFT_LAYER if scheme == "ollama-draft" else MODEL_LAYER, key)
    return _lmstudio(name, key)


def _pulled(name: str, key: str) -> Path:
    path = pulled_path(name)
    if _PART.match(name) and path.is_file():
        return path
    pull = next((p.name for p in PULLS.values() if any(f.name == name for f in p.files)), None)
    hint = f"run `specchat models pull {pull}`" if pull else "`specchat models list` shows what is pulled"
    raise ModelLoadError(f"{key}.source: '{name}' has not been pulled", key=f"{key}.source", hint=hint)


def ollama_stores() -> list[Path]:
    """Where Ollama keeps models, as Ollama reads it: OLLAMA_MODELS when set, else the
    user's store and the Linux service's."""
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.environ["OLLAMA_MODELS"]).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def parse_ollama_name(name: str) -> tuple[str, str, str, str]:
    """(host, namespace, model, tag) of ``[host/][namespace/]model[:tag]``, as Ollama
    names them; ValueError for anything that is not plain path parts."""
    path, _, tag = name.partition(":") if name.count(":") <= 1 else ("", "", "")
    parts = path.split("/") if path else []
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"'{name}' is not an Ollama model name")
    parts = [OLLAMA_HOST, "library"][: 3 - len(parts)] + parts
    tag = tag or "latest"
    if not all(_PART.match(p) for p in [*parts, tag]) or any(set(p) == {"."} for p in parts):
        raise ValueError(f"'{name}' is not an Ollama model name")
    return parts[0], parts[1], parts[2], tag


def ollama_manifest(name: str, key: str) -> tuple[Path, dict]:
    """(the store, the manifest) of an Ollama model name."""
    try:
        host, namespace, model, tag = parse_ollama_name(name)
    except ValueError as error:
        raise ModelLoadError(f"{key}.source: {error}", key=f"{key}.source",
                             hint="write ollama:NAME or ollama:NAME:TAG, as `ollama list` shows it") from None
    for store in ollama_stores():
        manifest = store / "manifests" / host / namespace / model / tag
        if manifest.is_file():
            return store, read_manifest(manifest, key)
    where = " or ".join(str(s) for s in ollama_stores())
    raise ModelLoadError(f"{key}.source: Ollama has no model '{model}:{tag}' in {where}", key=f"{key}.source",
                         hint=f"`ollama pull {model}:{tag}`, or set OLLAMA_MODELS to Ollama's store")


def read_manifest(path: Path, key: str) -> dict:
    try:
        if path.stat().st_size > 1 << 20:
            raise ValueError("larger than 1 MB")
        data = untrusted.json_value(untrusted.read_text(path))
        if not isinstance(data, dict) or not isinstance(data.get("layers", []), list):
            raise ValueError("no list of layers")
    except (OSError, ValueError) as error:  # ValueError: untrusted.Unreadable, the checks above
        raise ModelLoadError(f"{key}.source: the Ollama manifest {path} is unreadable ({error})", file=str(path),
                             key=f"{key}.source", hint="pull the model again with ollama") from None
    return data


def ollama_layer(name: str, media_type: str, key: str) -> Path:
    """The blob of the one layer of ``media_type`` in the model's manifest."""
    store, manifest = ollama_manifest(name, key)
    layers = [layer for layer in manifest.get("layers", []) if isinstance(layer, dict)]
    chosen = [layer for layer in layers if layer.get("mediaType") == media_type]
    if not chosen:
        if media_type == DRAFT_LAYER:
            raise ModelLoadError(f"{key}.source: the Ollama model '{name}' carries no draft model",
                                 key=f"{key}.source", hint="name a draft: [speculation.draft] source = \"ollama:…\"")
        kinds = sorted({str(layer.get("mediaType"))[:60] for layer in layers})
        raise ModelLoadError(f"{key}.source: the Ollama model '{name}' is not stored as one GGUF layer "
                             f"(its layers: {', '.join(kinds) or 'none'})", key=f"{key}.source",
                             hint="specchat reads Ollama models stored as one GGUF file; use a GGUF of it instead")
    if len(chosen) > 1:
        raise ModelLoadError(f"{key}.source: the Ollama model '{name}' is split over {len(chosen)} model layers",
                             key=f"{key}.source", hint="specchat reads Ollama models stored as one GGUF file")
    match = _DIGEST.match(str(chosen[0].get("digest", "")))
    if match is None:
        raise ModelLoadError(f"{key}.source: the Ollama manifest of '{name}' names no sha256 blob",
                             key=f"{key}.source", hint="pull the model again with ollama")
    blob = store / "blobs" / f"sha256-{match.group(1)}"
    if not blob.is_file():
        raise ModelLoadError(f"{key}.source: the blob of Ollama model '{name}' is missing ({blob})",
                             key=f"{key}.source", hint="pull the model again with ollama")
    return blob


def ollama_models() -> list[tuple[str, Path, bool]]:
    """(name as ollama:…, model blob, has a draft layer) of every one-GGUF-layer model in
    the stores; others are left out (models list says how many)."""
    found = []
    for store in ollama_stores():
        root = store / "manifests"
        if not root.is_dir():
            continue
        for manifest in sorted(p for p in root.glob("*/*/*/*") if p.is_file()):
            host, namespace, model, tag = manifest.relative_to(root).parts
            short = model if (host, namespace) == (OLLAMA_HOST, "library") else \
                f"{namespace}/{model}" if host == OLLAMA_HOST else f"{host}/{namespace}/{model}"
            name = f"{short}:{tag}"
            try:
                blob = ollama_layer(name, MODEL_LAYER, "source")
                has_draft = any(isinstance(layer, dict) and layer.get("mediaType") == DRAFT_LAYER
                                for layer in read_manifest(manifest, "source").get("layers", []))
            except ModelLoadError:
                continue
            found.append((f"ollama:{name}", blob, has_draft))
    return found


def lmstudio_folders() -> list[Path]:
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def _lmstudio(name: str, key: str) -> Path:
    parts = name.split("/")
    if not 2 <= len(parts) <= 3 or not all(_PART.match(p) for p in parts):
        raise ModelLoadError(f"{key}.source: 'lmstudio:{name}' is not PUBLISHER/REPO[/FILE.gguf]",
                             key=f"{key}.source", hint="as LM Studio's models folder lays it out")
    for folder in lmstudio_folders():
        repo = folder / parts[0] / parts[1]
        if len(parts) == 3 and (repo / parts[2]).is_file():
            return repo / parts[2]
        if len(parts) == 2 and repo.is_dir():
            ggufs = model_ggufs(repo)
            if len(ggufs) == 1:
                return ggufs[0]
            if ggufs:
                raise ModelLoadError(f"{key}.source: LM Studio's {parts[0]}/{parts[1]} holds {len(ggufs)} GGUF files",
                                     key=f"{key}.source", hint=f"name one: lmstudio:{name}/{ggufs[0].name}")
    raise ModelLoadError(f"{key}.source: no 'lmstudio:{name}' in {' or '.join(map(str, lmstudio_folders()))}",
                         key=f"{key}.source", hint="download it in LM Studio, or give the file's path")


def model_ggufs(folder: Path, pattern: str = "*.gguf") -> list[Path]:
    """The model GGUFs in a folder: a vision projector (mmproj-*) is not a model."""
    return sorted(p for p in folder.glob(pattern) if p.is_file() and not p.name.lower().startswith("mmproj"))


def lmstudio_models() -> list[tuple[str, Path]]:
    return [(f"lmstudio:{repo.parent.name}/{repo.name}/{gguf.name}", gguf) for folder in lmstudio_folders()
            for repo in sorted(p for p in folder.glob("*/*") if p.is_dir()) for gguf in model_ggufs(repo)]


def hf_cache_models() -> list[tuple[str, Path]]:
    """(``org/name`` + ``gguf_file``, path) of each GGUF in the Hugging Face cache's snapshots."""
    from huggingface_hub import constants  # where huggingface_hub itself keeps the cache

    found = []
    for repo in sorted(Path(constants.HF_HUB_CACHE).glob("models--*--*")):
        repo_id = repo.name[len("models--"):].replace("--", "/", 1)
        for snapshot in sorted(repo.glob("snapshots/*")):
            for gguf in model_ggufs(snapshot, "**/*.gguf"):
                found.append((f"{repo_id} (gguf_file = \"{gguf.relative_to(snapshot)}\")", gguf))
    return found


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
               for source, blob, has_draft in ollama_models()]
    places += [("lmstudio", source, path, "") for source, path in lmstudio_models()]
    places += [("hf-cache", source, path, "") for source, path in hf_cache_models()]
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
