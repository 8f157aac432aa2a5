"""The machine's checks, each judged against what the profile asks for: what it does not need
is never a failure. Features are read from the machine and the libraries, never assumed."""

from __future__ import annotations

import os
import platform
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat import paths
from specchat.errors import SpecchatError
from specchat.methods import METHODS, REMOTE_BACKENDS

OK, WARNING, FAIL = "ok", "warning", "fail"
MIN_PYTHON = (3, 10)  # pyproject's requires-python

# CPU feature flag (/proc/cpuinfo) → name; the x86 ones decide llama.cpp's and torch's kernels
X86_FEATURES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX"}
ARM_FEATURES = {"asimd": "NEON", "sve": "SVE", "bf16": "BF16", "i8mm": "I8MM"}
ATTENTION_WIDTH = {16: "AVX-512", 8: "AVX2"}  # specchat's small-batch attention kernel, by its block width


@dataclass(frozen=True)
class Check:
    """One line of the report. status: "ok", "warning" (works, but worse than it could)
    or "fail" (the profile cannot run here); fix: what to do, for a warning or a failure."""

    name: str
    status: str
    detail: str
    fix: str | None = None


def from_error(name: str, error: SpecchatError, status: str = FAIL) -> Check:
    """A loader's one-line error as a check: its file and message as the detail, its hint as the fix."""
    return Check(name, status, f"{error.file}: {error.message}" if error.file else error.message, error.hint)


def local_specs(profile: Any) -> list[tuple[str, Any]]:
    """(profile key, ModelSpec) of the models this process would load: none for a server."""
    if profile is None or profile.target.backend in REMOTE_BACKENDS:
        return []
    specs = [("target", profile.target)]
    draft = profile.speculation.draft
    if METHODS[profile.speculation.method].needs == "draft" and draft is not None:
        specs.append(("speculation.draft", draft))
    return specs


def needs_cuda(spec: Any) -> bool:
    return spec.backend == "transformers" and spec.device.startswith("cuda")


def check_python() -> Check:
    version = platform.python_version()
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", FAIL, f"Python {version}", f"use Python {'.'.join(map(str, MIN_PYTHON))} or newer")
    return Check("python", OK, f"Python {version} ({sys.executable})")


def check_torch() -> Check:
    try:
        import torch
    except ImportError as error:
        return Check("torch", FAIL, f"torch cannot be imported ({error})", "run `make setup` (or pip install torch)")
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    return Check("torch", OK, f"torch {torch.__version__} ({build})")


def check_cuda(profile: Any) -> Check:
    """CUDA as torch sees it; a failure only where a transformers model asks for it."""
    import torch

    wanted = [key for key, spec in local_specs(profile) if needs_cuda(spec)]
    if torch.cuda.is_available():
        names = ", ".join(f"{torch.cuda.get_device_name(i)} "
                          f"({torch.cuda.get_device_properties(i).total_memory / 2**30:.0f} GiB)"
                          for i in range(torch.cuda.device_count()))
        return Check("cuda", OK, f"CUDA {torch.version.cuda}: {names}")
    why = "not available (torch is a CPU-only build)" if not torch.version.cuda else (
        f"not available (torch built for CUDA {torch.version.cuda}, but no GPU or driver is visible)")
    if wanted:
        device = dict(local_specs(profile))[wanted[0]].device
        return Check("cuda", FAIL, f"{why}; the profile asks for {wanted[0]}.device = '{device}'",
                     'set device = "auto" or "cpu", or install a CUDA build of torch '
                     '(docs/guide.md, "With an NVIDIA GPU")')
    if profile.needs_gpu:  # it runs, but a reply of an 8B model on a CPU takes minutes
        return Check("cuda", WARNING, f"{why}; profile '{profile.name}' is made for a CUDA GPU and would run "
                     "very slowly on the CPU", "pick a CPU profile (specchat profiles list; default runs anywhere), "
                     "or run this one on a machine with a CUDA GPU")
    return Check("cuda", OK, f"{why}: models run on the CPU")


def check_mps(profile: Any) -> Check:
    import torch

    available = torch.backends.mps.is_available()
    wanted = any(spec.backend == "transformers" and spec.device == "mps" for _, spec in local_specs(profile))
    if not available and wanted:
        return Check("mps", FAIL, "not available; the profile asks for device = 'mps'", 'set device = "auto"')
    return Check("mps", OK, "available" if available else "not available")


def check_cpu() -> Check:
    """The CPU's vector and bf16 features, read from its own flag list."""
    from specchat.loading.cpu_features import detect_cpu_bf16, flags_from_cpuinfo

    machine = platform.machine()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    known = X86_FEATURES if machine.lower() in ("x86_64", "amd64") else ARM_FEATURES
    try:
        flags = flags_from_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        flags = None
    native, _ = detect_cpu_bf16()
    bf16 = "bf16 native: dtype auto = bfloat16" if native else "bf16 emulated: dtype auto = float32"
    if flags is None:
        return Check("cpu", OK, f"{machine}, {cores} cores (no /proc/cpuinfo flag list here); {bf16}")
    words = set(flags.split())
    listed = ", ".join(f"{name} {'yes' if flag in words else 'no'}" for flag, name in known.items())
    detail = f"{machine}, {cores} cores: {listed}; {bf16}"
    if known is X86_FEATURES and "avx2" not in words:
        return Check("cpu", WARNING, detail + "; without AVX2 llama.cpp and torch run much slower",
                     "expect a few tokens per second at most on this CPU")
    return Check("cpu", OK, detail)


def check_bitsandbytes(profile: Any) -> Check:
    """bitsandbytes for a quantised transformers model: installed, recent enough, and with
    kernels for the device the model would load on (the loader's own checks)."""
    import importlib.metadata

    quantised = [(key, spec) for key, spec in local_specs(profile)
                 if spec.backend == "transformers" and spec.quantization != "none"]
    try:
        version = importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if not quantised:
        return Check("bitsandbytes", OK, f"{version or 'not installed'} (this profile does not quantise)")
    key, spec = quantised[0]
    if version is None:
        return Check("bitsandbytes", FAIL, f"not installed; {key}.quantization = '{spec.quantization}' needs it",
                     "pip install 'bitsandbytes>=0.48'")
    import torch

    from specchat.loading.devices import quantization_config, resolve_device, resolve_dtype

    if needs_cuda(spec):
        if not torch.cuda.is_available():
            return Check("bitsandbytes", FAIL, f"{version}, but its {spec.quantization} kernels for "
                         f"{key}.device = '{spec.device}' need CUDA, which is not available here",
                         'set device = "cpu" (bitsandbytes >= 0.48 runs 4-bit and 8-bit on CPU too) or "auto"')
    try:
        device = resolve_device(spec, key)
        quantization_config(spec, device, key, resolve_dtype(spec, device)[0])
    except SpecchatError as error:
        return from_error("bitsandbytes", error)
    if device.startswith("cuda") and _cuda_library_missing():
        return Check("bitsandbytes", FAIL, f"{version}: its CUDA library did not load, so {spec.quantization} "
                     f"cannot run on {device}", "pip install -U 'bitsandbytes>=0.48' (a build for torch's CUDA "
                                                f"{torch.version.cuda}), or set device = \"cpu\"")
    return Check("bitsandbytes", OK, f"{version}: {spec.quantization} runs on {device}")


def _cuda_library_missing() -> bool:
    """bitsandbytes (0.45 on) imports without its native CUDA library and stands a mock in
    for it that fails at the first kernel call: the mock's class says so now."""
    from bitsandbytes import cextension

    mock = getattr(cextension, "ErrorHandlerMockBNBNativeLibrary", None)
    return mock is not None and isinstance(getattr(cextension, "lib", None), mock)


def check_llama_cpp(profile: Any) -> list[Check]:
    """llama-cpp-python: its version and build (specchat's patches, the staged layer-input
    API EAGLE-3 heads read, GPU offload, the CPU features it was compiled for)."""
    from specchat.loading.llamacpp import GPU_BUILD_HINT, INSTALL_HINT, batched_kernel, small_batch_attention_width

    specs = [(key, spec) for key, spec in local_specs(profile) if spec.backend == "llama.cpp"]
    try:
        import llama_cpp
    except ImportError as error:
        status = FAIL if specs else WARNING
        why = (f"the profile's {specs[0][0]} runs on llama.cpp" if specs
               else "llama.cpp profiles (the default) cannot run")
        return [Check("llama-cpp-python", status, f"not importable ({error}): {why}", INSTALL_HINT)]
    from specchat.engine.backends.llamacpp_features import bind

    kernel, width = batched_kernel(llama_cpp), small_batch_attention_width(llama_cpp)
    attention = (f"small-batch attention for {ATTENTION_WIDTH.get(width, f'width {width}')}" if width
                 else "no small-batch attention kernel")
    version = f"{llama_cpp.__version__}, {kernel} kernels, {attention}"
    checks = [Check("llama-cpp-python", OK, version) if kernel != "upstream" else Check(
        "llama-cpp-python", WARNING, f"{version}: built without specchat's patches, so verifying drafts costs more",
        "run `make setup` (scripts/build-llama-cpp-python.sh builds it with patches/llama.cpp)")]
    # EAGLE-3 reads layer inputs; Medusa only the final hidden states, which the public API gives
    heads_here = profile is not None and METHODS[profile.speculation.method].needs == "eagle3" and any(
        key == "target" for key, _ in specs)
    if bind(llama_cpp) is not None:
        checks.append(Check("llama.cpp layer inputs", OK, "the staged layer-input API is exported (EAGLE-3 heads run)"))
    else:
        checks.append(Check("llama.cpp layer inputs", FAIL if heads_here else WARNING,
                            "this build does not export the staged layer-input API: EAGLE-3 heads cannot run on "
                            "llama.cpp", "run `make setup` (llama-cpp-python 0.3.36), or run the head's profile on "
                                         "transformers"))
    offload = bool(llama_cpp.llama_supports_gpu_offload())
    gpu_layers = [key for key, spec in specs if spec.n_gpu_layers]
    if not offload and gpu_layers:
        checks.append(Check("llama.cpp GPU offload", FAIL, f"not compiled in; {gpu_layers[0]}.n_gpu_layers asks for "
                            "GPU layers", GPU_BUILD_HINT))
    else:
        checks.append(Check("llama.cpp GPU offload", OK, "compiled in" if offload else "not compiled in (CPU only)"))
    checks.append(Check("llama.cpp build", OK, _system_info(llama_cpp)))
    return checks


def _system_info(llama_cpp: Any) -> str:
    """The features llama.cpp was compiled for, from its own system-info line."""
    text = llama_cpp.llama_print_system_info()
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    parts = []
    for section in text.split("|"):
        name, _, value = section.rpartition("=")
        if value.strip() == "1":
            parts.append(name.split(":")[-1].strip())
        elif ":" in section and "=" not in section:
            parts.append(section.strip())
    return "compiled for " + (", ".join(p for p in parts if p) or text.strip() or "(no system info)")


def check_data_dir() -> list[Check]:
    """The data dir (recordings go to its sessions/) can be written, and the chats in it are
    private: the dir 0700 and its files 0600 (sessions/private_files.py)."""
    from specchat.sessions.fileformat import sessions_dir
    from specchat.sessions.private_files import DIR_MODE, FILE_MODE

    data, sessions = paths.data_dir(), sessions_dir()
    fix = "set SPECCHAT_DATA_DIR to a writable directory of yours"
    existing = next((p for p in (sessions, *sessions.parents) if p.exists() or p.is_symlink()), None)
    if existing is None or not existing.is_dir():
        return [Check("data dir", FAIL, f"{existing or data} is not a directory, so chats cannot be recorded there",
                      f"remove that file, or {fix}")]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [Check("data dir", FAIL, f"{existing} cannot be written, so chats cannot be recorded", fix)]
    if existing != sessions:
        return [Check("data dir", OK, f"{sessions} is created (0700) on the first recorded chat")]
    mode = stat.S_IMODE(sessions.stat().st_mode)
    checks = [Check("data dir", OK, f"{sessions} is writable and private ({mode:04o})") if not mode & 0o077 else
              Check("data dir", WARNING, f"{sessions} lets others in ({mode:04o}): they can list your chats",
                    f"chmod {DIR_MODE:o} {sessions} (specchat tightens it on the next recording it makes)")]
    try:
        shared = [p for p in sessions.iterdir() if p.is_file() and stat.S_IMODE(p.stat().st_mode) & 0o077]
    except OSError as error:
        return checks + [Check("chats", FAIL, f"{sessions} cannot be listed ({error.strerror})", fix)]
    if shared:
        checks.append(Check("chats", WARNING,
                            f"{len(shared)} recorded chat(s) readable by others, e.g. {shared[0].name}",
                            f"chmod {FILE_MODE:o} {sessions}/*"))
    return checks
