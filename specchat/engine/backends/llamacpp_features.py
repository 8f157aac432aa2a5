"""Hidden states out of libllama, for heads that read the target's features (EAGLE-3).

llama-cpp-python binds none of ``src/llama-ext.h`` (C++ linkage), so its three symbols
(``llama_set_embeddings_layer_inp``, ``llama_get_embeddings_layer_inp``,
``llama_model_get_tok_embd``) are called by their mangled names. A graph that never
records a layer's input aborts the process, so the architectures that do are listed here
and a backend declares the capability from this list, never by trying.

Design notes: docs/design/backends.md
"""

from __future__ import annotations

import ctypes

import numpy as np

# general.architecture values whose graphs record layer inputs (vendored llama.cpp 0.3.36)
LAYER_INPUT_ARCHITECTURES = frozenset({
    "llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "gemma4", "lfm2", "gpt-oss",
})

# general.architecture values whose graphs hand out the final norm's output as the
# context's embeddings (``res->t_embd`` set right after ``build_norm(model.output_norm)``,
# the tensor the output projection reads, in ``src/models/*.cpp`` of the vendored
# llama.cpp). With ``llama_set_embeddings(ctx, true)`` and pooling NONE (a generative
# model's default) one decode then returns those rows *and* the logits — but it outputs
# every token of the batch, so the backend turns it on only for the tokens it wants
# logits for. Checked on the embedded SmolLM2 GGUF (llama): the logits were bit-identical
# to a decode without embeddings, and token_embd · h reproduced them (correlation
# 0.99997; SmolLM2 ties its output to its embeddings).
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
        self._set = getattr(lib, _SET)
        self._set.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool]
        self._set.restype = None
        self._get = getattr(lib, _GET)
        self._get.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self._get.restype = ctypes.POINTER(ctypes.c_float)
        self._embd = getattr(lib, _EMBD)
        self._embd.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)]
        self._embd.restype = ctypes.c_uint32

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


def bind(llama_cpp) -> LayerInputs | None:
    """The staged API of the libllama llama-cpp-python loaded, or None where that build
    does not export it (an older or newer llama.cpp)."""
    try:
        return LayerInputs(llama_cpp.llama_cpp._lib)
    except AttributeError:
        return None
