"""One ggml operation at a time, on the CPU backend llama-cpp-python ships (ctypes, for
tests): what a kernel test needs to compare one op with a NumPy reference, without a
model's other ops around it. Only the few entry points the tests call are declared."""

from __future__ import annotations

import ctypes as C
from pathlib import Path

import numpy as np

F32, F16 = 0, 1


class _InitParams(C.Structure):
    _fields_ = [("mem_size", C.c_size_t), ("mem_buffer", C.c_void_p), ("no_alloc", C.c_bool)]


def _declare(lib: C.CDLL, name: str, restype, *argtypes) -> None:
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)


class Ggml:
    """ggml-base and ggml-cpu from the directory beside llama_cpp (loaded once per process:
    the same libraries llama.cpp runs on)."""

    def __init__(self, lib_dir: Path):
        self.base = C.CDLL(str(lib_dir / "libggml-base.so"), mode=C.RTLD_GLOBAL)
        self.cpu = C.CDLL(str(lib_dir / "libggml-cpu.so"), mode=C.RTLD_GLOBAL)
        p = C.c_void_p
        _declare(self.base, "ggml_init", p, _InitParams)
        _declare(self.base, "ggml_free", None, p)
        _declare(self.base, "ggml_new_tensor_4d", p, p, C.c_int, C.c_int64, C.c_int64, C.c_int64, C.c_int64)
        _declare(self.base, "ggml_flash_attn_ext", p, p, p, p, p, p, C.c_float, C.c_float, C.c_float)
        _declare(self.base, "ggml_new_graph", p, p)
        _declare(self.base, "ggml_build_forward_expand", None, p, p)
        _declare(self.base, "ggml_get_data", p, p)
        _declare(self.base, "ggml_nbytes", C.c_size_t, p)
        _declare(self.cpu, "ggml_graph_compute_with_ctx", C.c_int, p, p, C.c_int)

    def _tensor(self, ctx, gtype: int, array: np.ndarray):
        """A tensor holding array; ggml's ne is the reverse of NumPy's shape."""
        shape = list(reversed(array.shape)) + [1] * (4 - array.ndim)
        t = self.base.ggml_new_tensor_4d(ctx, gtype, *shape)
        dtype = np.float16 if gtype == F16 else np.float32
        data = np.ascontiguousarray(array, dtype=dtype)
        assert self.base.ggml_nbytes(t) == data.nbytes
        C.memmove(self.base.ggml_get_data(t), data.ctypes.data, data.nbytes)
        return t

    def flash_attn_ext(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                       scale: float, n_threads: int = 2) -> np.ndarray:
        """ggml_flash_attn_ext on the CPU, llama.cpp's layout and types: q [heads, tokens, D]
        in F32, k and v [kv heads, positions, D] in F16, mask [tokens, positions] in F16
        (0 or -inf). Returns [tokens, heads, D] in F32 (ggml's permuted result)."""
        n_head, n_tokens, d = q.shape
        size = 64 * 1024 * 1024 + 4 * (q.nbytes + k.nbytes + v.nbytes) + 64 * n_head * n_tokens * d * (k.shape[1] // 128 + 2)
        ctx = self.base.ggml_init(_InitParams(size, None, False))
        if not ctx:
            raise MemoryError("ggml_init failed")
        try:
            tq = self._tensor(ctx, F32, q)
            tk = self._tensor(ctx, F16, k)
            tv = self._tensor(ctx, F16, v)
            tm = self._tensor(ctx, F16, mask) if mask is not None else None
            out = self.base.ggml_flash_attn_ext(ctx, tq, tk, tv, tm, scale, 0.0, 0.0)
            graph = self.base.ggml_new_graph(ctx)
            self.base.ggml_build_forward_expand(graph, out)
            status = self.cpu.ggml_graph_compute_with_ctx(ctx, graph, n_threads)
            if status != 0:
                raise RuntimeError(f"ggml_graph_compute_with_ctx returned {status}")
            result = np.empty((n_tokens, n_head, d), dtype=np.float32)
            C.memmove(result.ctypes.data, self.base.ggml_get_data(out), result.nbytes)
            return result
        finally:
            self.base.ggml_free(ctx)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                        scale: float) -> np.ndarray:
    """The same attention in float64: [tokens, heads, D]."""
    n_head, n_tokens, _ = q.shape
    group = n_head // k.shape[0]
    kk = np.repeat(k.astype(np.float64), group, axis=0)  # [heads, positions, D]
    vv = np.repeat(v.astype(np.float64), group, axis=0)
    scores = np.einsum("htd,hpd->htp", q.astype(np.float64), kk) * scale
    if mask is not None:
        scores = scores + mask.astype(np.float64)[None]
    scores -= scores.max(axis=2, keepdims=True)
    w = np.exp(scores)
    w /= w.sum(axis=2, keepdims=True)
    return np.einsum("htp,hpd->thd", w, vv)
