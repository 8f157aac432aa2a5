"""specchat's patch to llama.cpp's CPU matmul (patches/llama.cpp), as `make setup` builds it.

Batches of up to 8 tokens — a decode step and the drafts it verifies — stream each weight
row once for every column instead of tiling four rows at a time. The patch claims two
things: set-up really builds it, and it changes no number (each output is the same
sequence of multiply-adds as in the tiles). The speed it buys is a benchmark's business
(docs/benchmarks/README.md), not a test's.
"""

from __future__ import annotations

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make setup builds it)")

from specchat.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402
from specchat.loading.embedded import find_gguf  # noqa: E402
from specchat.loading.llamacpp import batched_kernel, converted_gguf  # noqa: E402


def test_setup_builds_llama_cpp_with_the_stream_rows_kernel():
    """Fails where llama-cpp-python came from somewhere other than
    scripts/build-llama-cpp-python.sh, or where the patch stopped applying to the
    pinned version (the script then builds without it and says so in its log)."""
    assert batched_kernel(llama_cpp) == "stream-rows", (
        "llama-cpp-python lacks specchat's llama.cpp patch: run `make setup` (see .venv/llama-cpp-build.log)")
    assert llama_cpp.__version__.endswith("+specchat.1")


@pytest.mark.parametrize("splits", [[4, 8], [2, 2, 2, 6], [7, 5]])
def test_small_batches_give_the_logits_of_one_large_batch(splits):
    """The same 12 tokens decoded as one batch (tiled kernel, 12 > 8 columns) and as
    small batches (streamed kernel) give bit-identical logits at every position, on a
    BF16 file, the format the patch speeds up. Planted bug: a second accumulator per
    column in stream_rows (a different summation order) fails this."""
    path = converted_gguf(llama_cpp, find_gguf(), "BF16", "target")
    backend = LlamaCppBackend(path, n_threads=2, max_ctx=256)
    ids = [1, 504, 3458, 282, 260, 1345, 30, 1782, 314, 10863, 1085, 11]
    whole = backend.forward(ids, num_logits=len(ids)).numpy()
    backend.reset()
    parts, start = [], 0
    for size in splits:
        parts.append(backend.forward(ids[:start + size], num_logits=size).numpy())
        start += size
    pieces = np.concatenate(parts)
    assert np.array_equal(whole, pieces), f"max difference {np.abs(whole - pieces).max()}"
