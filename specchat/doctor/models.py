"""The profile's models, found by the loader's own offline ``locate`` (never downloaded), and
the memory their weights need: estimated from headers, the KV cache on top (hence TIGHT)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat import untrusted
from specchat.doctor.checks import FAIL, OK, WARNING, Check, from_error, local_specs
from specchat.errors import ModelLoadError, SpecchatError
from specchat.methods import METHODS

# bytes a parameter takes once llama.cpp converts to this type (block scales included)
GGUF_BYTES = {"F32": 4.0, "F16": 2.0, "BF16": 2.0, "Q8_0": 34 / 32, "Q4_0": 18 / 32, "Q4_1": 20 / 32,
              "Q4_K_M": 4.85 / 8, "Q5_K_M": 5.7 / 8, "Q6_K": 6.56 / 8}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
QUANT_BYTES = {"8bit": 1.0, "4bit-nf4": 0.5, "4bit-fp4": 0.5}
TIGHT = 0.8  # above this share of what is free: a warning (the KV cache is not counted)


@dataclass(frozen=True)
class Footprint:
    """One model's weights in memory: about ``size`` bytes, in VRAM when ``gpu``."""

    key: str
    size: int
    gpu: bool
    how: str


def check_models(profile: Any) -> tuple[list[Check], list[Footprint]]:
    """One line per model the profile loads (target, draft, head), and their footprints."""
    if profile.target.backend not in ("transformers", "llama.cpp"):
        return [Check("models", OK, f"served by {profile.target.backend} at {profile.target.url}: nothing loads here "
                                    f"(`specchat profiles check {profile.name}` asks the server)")], []
    base = profile.source_path.parent if profile.source_path else None
    checks, footprints = [], []
    for key, spec in local_specs(profile):
        try:
            where, footprint = (_gguf_model if spec.backend == "llama.cpp" else _transformers_model)(key, spec, base)
        except SpecchatError as error:
            checks.append(from_error(f"{key} model", error))
            continue
        checks.append(Check(f"{key} model", OK, where))
        footprints.append(footprint)
    if len(footprints) == len(checks) == 2 and (pairing := _draft_tokenizer(profile, base)) is not None:
        checks.append(pairing)
    if METHODS[profile.speculation.method].head:
        from specchat.loading.heads import resolve_head

        try:
            folder = resolve_head(profile.speculation.head, profile.speculation.head_revision, base, offline=True)
            size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
            checks.append(Check("head", OK, f"{profile.speculation.head} in {folder}"))
            footprints.append(Footprint("head", size, False, "its safetensors"))
        except SpecchatError as error:
            checks.append(from_error("head", error))
    return checks, footprints


def _draft_tokenizer(profile: Any, base: Path | None) -> Check | None:
    """Whether a GGUF draft's tokenizer is its GGUF target's (their headers' token lists),
    when both are on disk here; loading then checks them id by id."""
    draft = profile.speculation.draft
    if draft is None or draft.backend != "llama.cpp" or profile.target.backend != "llama.cpp":
        return None
    from specchat.loading.models import locate
    from specchat.models.gguf_meta import read_info

    try:
        target, drafted = (read_info(locate(spec, key, base))
                           for key, spec in (("target", profile.target), ("speculation.draft", draft)))
    except (SpecchatError, OSError, ValueError):
        return None  # the model lines above say what is wrong with a file
    if not target.tokenizer or not drafted.tokenizer:
        return None
    if target.tokenizer == drafted.tokenizer:
        return Check("draft tokenizer", OK, f"the draft's {drafted.vocab_size:,} tokens are the target's")
    return Check("draft tokenizer", WARNING,
                 f"the draft's tokenizer ({drafted.vocab_size:,} tokens) is not the target's "
                 f"({target.vocab_size:,}): loading refuses it if any id names another token",
                 "pick a draft of the target's family (`specchat models list` names the candidates)")


def check_memory(footprints: list[Footprint], complete: bool = True) -> list[Check]:
    """The weights against free RAM (and free VRAM for what goes to a GPU); not estimated
    when a model was not found (``complete`` False)."""
    if not complete:
        return [Check("memory", WARNING, "not estimated: a model above was not found", "fix the failures above")]
    checks = []
    ram = [f for f in footprints if not f.gpu]
    vram = [f for f in footprints if f.gpu]
    if ram or not vram:
        checks.append(_against("memory", ram, free_ram_bytes(), "RAM"))
    if vram:
        import torch

        free = int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None
        checks.append(_against("gpu memory", vram, free, "VRAM"))
    return checks


def _against(name: str, parts: list[Footprint], free: int | None, where: str) -> Check:
    need = sum(f.size for f in parts)
    listed = "; ".join(f"{f.key} {_size(f.size)} = {f.how}" for f in parts)
    if free is None:
        return Check(name, WARNING, f"weights about {_size(need)}; free {where} unknown here; {listed}",
                     "check free memory yourself before loading")
    detail = f"weights need about {_size(need)} of {_size(free)} free {where}; {listed}"
    if need > free:
        return Check(name, FAIL, detail, "close other programs, or use a smaller model or a 4-bit format "
                                         '(quantization = "4bit-nf4", or a Q4_K_M GGUF)')
    if need > TIGHT * free:
        return Check(name, WARNING, detail + "; little is left for the KV cache",
                     "close other programs, or set a smaller n_ctx / max_new_tokens")
    return Check(name, OK, detail)


def free_ram_bytes() -> int:
    """Memory available to a new process."""
    import psutil

    return int(psutil.virtual_memory().available)


def _transformers_model(key: str, spec: Any, base: Path | None) -> tuple[str, Footprint]:
    from specchat.loading.embedded import is_embedded
    from specchat.loading.models import locate

    path = locate(spec, key, base)  # by the loader's own rules, offline
    where = f"embedded: {path}" if is_embedded(spec.source) else str(path)
    if path.is_file():  # a GGUF that transformers reads (the embedded wheel's: converted on the first start)
        where += " (converted once on the first start, about 40 s)" if is_embedded(spec.source) else ""
        params = gguf_params(path)
    else:
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} has no config.json", key=f"{key}.source",
                                 hint="give a complete transformers model directory (config.json, weights)")
        params = safetensors_params(path) or sum(p.stat().st_size for p in path.glob("*.bin")) // 4
        if not params:
            raise ModelLoadError(f"{path} has no weights (*.safetensors)", key=f"{key}.source",
                                 hint="give a complete model directory (a Hub model: download it again)")
    per, precision = _transformers_bytes(spec)
    how = f"{params / 1e6:.0f}M parameters × {per:g} B, {precision}"
    return where, Footprint(key, int(params * per), _on_gpu(spec), how)


def _transformers_bytes(spec: Any) -> tuple[float, str]:
    if spec.quantization != "none":
        return QUANT_BYTES[spec.quantization], spec.quantization
    if spec.dtype != "auto":
        return DTYPE_BYTES[spec.dtype], spec.dtype
    if _on_gpu(spec):
        return 2, "auto: 16-bit on CUDA"
    from specchat.loading.cpu_features import detect_cpu_bf16

    return (2, "auto: bfloat16") if detect_cpu_bf16()[0] else (4, "auto: float32")


def _on_gpu(spec: Any) -> bool:
    if spec.backend == "llama.cpp":
        return spec.n_gpu_layers != 0
    if spec.device.startswith("cuda"):
        return True
    if spec.device != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def _gguf_model(key: str, spec: Any, base: Path | None) -> tuple[str, Footprint]:
    from specchat.loading.llamacpp import check_gguf, conversion_path, is_converted, resolve_gguf_type
    from specchat.loading.models import locate

    path = locate(spec, key, base)  # by the loader's own rules, offline
    check_gguf(path, key)
    gguf_type, _ = resolve_gguf_type(spec.gguf_type, spec.n_gpu_layers)
    where = str(path)
    if gguf_type:  # cached already? the loader's own test
        when = "in the cache" if is_converted(conversion_path(path, gguf_type)) else "on the first start, then cached"
        where += f" (converted to {gguf_type} {when})"
    params = gguf_params(path)  # always: the header is read whole, as the loader reads it
    if gguf_type and params:
        size, how = int(params * GGUF_BYTES.get(gguf_type, 2.0)), f"{params / 1e6:.0f}M parameters in {gguf_type}"
    else:
        size, how = path.stat().st_size, "the GGUF file"
    return where, Footprint(key, size, _on_gpu(spec), how)


def safetensors_params(folder: Path) -> int:
    """Parameters in a folder's *.safetensors, from their headers (a few KB read)."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        try:
            total += sum(math.prod(tensor["shape"]) for tensor in untrusted.safetensors_header(path)[1].values())
        except (OSError, untrusted.Unreadable) as error:
            raise ModelLoadError(f"the safetensors header cannot be read ({type(error).__name__}: {error})",
                                 file=str(path), hint="the file is damaged or not safetensors: download it again"
                                 ) from None
    return total


def gguf_params(path: Path) -> int:
    """Parameters in a GGUF file, from its header read whole (models/gguf_meta.py): a
    header that lies (a tensor count past the file, a file cut short) raises
    ModelLoadError, naming the file, where ``run`` would refuse it."""
    from specchat.models.gguf_meta import read_info

    try:
        return read_info(path).parameters
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"the GGUF header cannot be read ({type(error).__name__}: {str(error)[:120]})",
                             file=str(path), hint="the file is damaged or cut short: download it again") from None


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e3:.0f} kB"
