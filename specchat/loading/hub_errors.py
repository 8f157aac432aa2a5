"""The Hugging Face Hub: a file or a snapshot fetched (or, offline, found in the local
cache), and the many ways a from_pretrained call fails turned into one SpecchatError each."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..errors import ModelLoadError


def from_hub(repo: str, revision: str | None, key: str, what: str, file: str | None = None,
             patterns: list[str] | None = None, offline: bool = False) -> Path:
    """``file`` of Hub repo ``repo`` (its snapshot folder without one, only ``patterns``);
    ``offline``: from the local cache alone, else a ModelLoadError that names the download."""
    from huggingface_hub import hf_hub_download, snapshot_download

    def fetch(**local) -> Path:
        if file:
            return Path(hf_hub_download(repo, file, revision=revision, **local))
        return Path(snapshot_download(repo, revision=revision, allow_patterns=patterns, **local))

    if offline:
        try:
            return fetch(local_files_only=True)
        except Exception:  # noqa: BLE001 - not cached, whichever way huggingface_hub says it
            name = f"{repo}/{file}" if file else f"'{repo}'"
            download = " ".join(filter(None, (repo, file, f"--revision {revision}" if revision else "")))
            raise ModelLoadError(f"{name} is not in the Hugging Face cache (nothing is downloaded here)", key=key,
                                 hint=f"with network, run `hf download {download}` once (hf comes with "
                                      "huggingface_hub), or give a local path") from None
    with friendly_load_errors(repo, key, what):
        return fetch()


@contextlib.contextmanager
def friendly_load_errors(source: str, key: str, what: str = "model"):
    """Re-raise loading failures for ``source`` (profile key ``key``) as ModelLoadError."""
    try:
        yield
    except ModelLoadError:
        raise
    except Exception as error:  # noqa: BLE001 - classified below, re-raised as one line
        raise classify(error, source, key, what) from None


def classify(error: BaseException, source: str, key: str, what: str) -> ModelLoadError:
    import torch

    causes = _chain(error)
    names = {type(e).__name__ for e in causes}
    text = " ".join(str(e) for e in causes)
    def make(message, hint):
        return ModelLoadError(message, key=key, hint=hint)

    if any(isinstance(e, torch.OutOfMemoryError) for e in causes) or "out of memory" in text.lower():
        return make(f"out of memory while loading {what} '{source}'",
                    "use quantization = \"4bit-nf4\", a smaller model, or close other GPU programs")
    if "GatedRepoError" in names or "gated repo" in text.lower():
        return make(f"{what} '{source}' is gated on the Hugging Face Hub",
                    f"accept its licence at https://huggingface.co/{source} and log in with `hf auth login`")
    if "RevisionNotFoundError" in names:
        return make(f"revision of {what} '{source}' not found on the Hub", "check the 'revision' key")
    if "RepositoryNotFoundError" in names or "is not a valid model identifier" in text:
        return make(f"{what} '{source}' not found on the Hugging Face Hub (or it is private)",
                    "check the spelling of 'source', or log in with `hf auth login` for a private repo")
    offline = {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError", "ConnectError",
               "ConnectTimeout", "ReadTimeout", "MaxRetryError"}
    if names & offline or "couldn't connect" in text or "Name or service not known" in text:
        return make(f"{what} '{source}' is not downloaded and the Hugging Face Hub cannot be reached (offline?)",
                    "connect to the internet once to download it, or point 'source' at a local model directory")
    if "EntryNotFoundError" in names or "does not appear to have a file named" in text:
        return make(f"{what} '{source}' is missing files ({_first_line(error)})",
                    "check that the directory or repo holds a complete transformers model (config.json, weights)")
    if isinstance(error, ImportError):
        return make(f"loading {what} '{source}' needs a missing package: {_first_line(error)}",
                    "pip install the package named above")
    if isinstance(error, ValueError) and "trust_remote_code" in text:
        return make(f"{what} '{source}' needs custom code from its repo",
                    "set trust_remote_code = true in the profile only if you trust that repo")
    return make(f"cannot load {what} '{source}': {_first_line(error)}",
                "check the profile's 'source' (a Hub id, a local model directory or a .gguf file)")


def _chain(error: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while error is not None and id(error) not in seen:
        out.append(error)
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return out


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]
