"""Hidden states out of libllama for EAGLE-3 heads: ``src/llama-ext.h``'s three symbols,
called by their mangled names (llama-cpp-python binds none; docs/design/backends.md).
"""

from __future__ import annotations

import ctypes

import numpy as np

# general.architecture values whose graphs record layer inputs (vendored llama.cpp 0.3.36):
# a graph that does not aborts the process, so a backend declares the capability from this list
LAYER_INPUT_ARCHITECTURES = frozenset({
    "llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "gemma4", "lfm2", "gpt-oss",
})

# general.architecture values whose graphs hand out the final norm's output as the
# context's embeddings, for every token of a decode (docs/design/backends.md)
FINAL_HIDDEN_ARCHITECTURES = frozenset({
    "llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "gemma2", "gemma3", "gemma4",
    "lfm2", "gpt-oss", "phi3", "mistral3", "granite", "smollm3",
})

_SET = "_Z30llama_set_embeddings_layer_inpP13llama_contextjb"
_GET = "_Z30llama_get_embeddings_layer_inpP13llama_contextj"
_EMBD = "_Z24llama_model_get_tok_embdPK11llama_modelPf"


class LayerInputs:
    """The three staged functions, bound once from the loaded libllama."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        floats = ctypes.POINTER(ctypes.c_float)
        self._set = _typed(getattr(lib, _SET), [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None)
        self._get = _typed(getattr(lib, _GET), [ctypes.c_void_p, ctypes.c_uint32], floats)
        self._embd = _typed(getattr(lib, _EMBD), [ctypes.c_void_p, floats], ctypes.c_uint32)

    def enable(self, ctx, layer: int) -> None:
        self._set(ctx, layer, True)

    def read(self, ctx, layer: int, n_tokens: int, n_embd: int) -> np.ndarray:
        """A copy of [n_tokens, n_embd] float32 (the buffer is reused by the next decode)."""
        pointer = self._get(ctx, layer)
        if not pointer:
            raise RuntimeError(f"llama.cpp kept no input for layer {layer}")
        return np.ctypeslib.as_array(pointer, shape=(n_tokens, n_embd)).copy()

    def token_embeddings(self, model, n_vocab: int, n_embd: int) -> np.ndarray:
        out = np.empty((n_vocab, n_embd), dtype=np.float32)
        written = self._embd(model, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if written != n_vocab * n_embd:
            raise RuntimeError(f"llama.cpp wrote {written} of {n_vocab * n_embd} embedding values")
        return out


def _typed(function, argtypes: list, restype):
    function.argtypes, function.restype = argtypes, restype
    return function


def bind(llama_cpp) -> LayerInputs | None:
    """The staged API of the libllama llama-cpp-python loaded, or None where that build
    does not export it (an older or newer llama.cpp)."""
    try:
        return LayerInputs(llama_cpp.llama_cpp._lib)
    except AttributeError:
        return None
