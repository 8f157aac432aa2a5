"""specchat's patches to llama.cpp's CPU kernels (patches/llama.cpp), as `make setup` builds them.

A batch of a few tokens — a decode step and the drafts it verifies — gets two kernels of
ours: a matmul that streams each weight row once for every column (batches of up to 8),
and an attention kernel that reads each block of K and V once a step for every token and
query head that uses it, in ranges of positions merged at the end (AVX-512 or AVX2, head sizes
64 and 128). The claims checked here: set-up really builds them; the matmul
changes no number; a token's logits do not depend on the batch it came in; and the
attention agrees with llama.cpp's own within the rounding noise a batch already has. The
speed they buy is a benchmark's business (docs/benchmarks/RESULTS.md and archive/), not a test's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from specchat.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402
from specchat.loading.embedded import find_gguf  # noqa: E402
from specchat.loading.llamacpp import batched_kernel, converted_gguf  # noqa: E402
from tests.support import ROOT
from tests.support.needs import llama_cpp, needs_llama_cpp

IDS = [1, 504, 3458, 282, 260, 1345, 30, 1782, 314, 10863, 1085, 11]
pytestmark = needs_llama_cpp  # each test counted in the run's summary when it cannot run


@pytest.fixture(scope="module")
def bf16_gguf():
    return converted_gguf(llama_cpp, find_gguf(), "BF16", "target")


def test_setup_builds_llama_cpp_with_specchats_kernels():
    """Fails where llama-cpp-python came from somewhere other than
    scripts/build-llama-cpp-python.sh, or where a patch stopped applying to the pinned
    version (the script then builds without them and says so in its log)."""
    assert batched_kernel(llama_cpp) == "specchat", (
        "llama-cpp-python lacks specchat's llama.cpp patches: run `make setup` (see .venv/llama-cpp-build.log)")
    assert llama_cpp.__version__.endswith("+specchat.13")


@pytest.mark.parametrize("splits", [[4, 8], [2, 2, 2, 6], [7, 5]])
def test_small_batches_give_the_logits_of_one_large_batch(bf16_gguf, splits):
    """The same 12 tokens decoded as one batch (tiled matmul, 12 > 8 columns) and as
    small batches (streamed matmul) give bit-identical logits at every position, on a
    BF16 file, the format the matmul patch speeds up; attention takes the small-batch
    kernel both ways, which computes each token alike whatever batch of 2–63 it is in. Planted
    bug: a second accumulator per column in stream_rows (another summation order) fails
    this (0.32 apart)."""
    backend = LlamaCppBackend(bf16_gguf, n_threads=2, max_ctx=256)
    whole = backend.forward(IDS, num_logits=len(IDS)).numpy()
    backend.reset()
    parts, start = [], 0
    for size in splits:
        parts.append(backend.forward(IDS[:start + size], num_logits=size).numpy())
        start += size
    pieces = np.concatenate(parts)
    assert np.array_equal(whole, pieces), f"max difference {np.abs(whole - pieces).max()}"


def verify_batch_logits(path) -> np.ndarray:
    """[6, V] a 6-token verify batch's logits after 300 tokens of context."""
    backend = LlamaCppBackend(str(path), n_threads=2, max_ctx=1024)
    prompt = [int(x) for x in np.random.default_rng(0).integers(100, 40000, 300)]
    backend.forward(prompt)
    return backend.forward(prompt + [2000, 3000, 3007, 3014, 3021, 3028], num_logits=6).numpy()


def ours_and_upstream(rows_of, path) -> tuple[np.ndarray, np.ndarray]:
    """``rows_of(path)`` with our kernels and with llama.cpp's own (SPECCHAT_GGML_UPSTREAM=1).
    The patched library reads the variable once per process, so llama.cpp's own run in a
    fresh process; ours run in this one (which never sets the variable) — one interpreter
    importing torch and llama.cpp fewer — unless this process has it set (then both run
    in fresh processes, ours without it)."""
    upstream = fresh_process(rows_of, path, upstream=True)
    if "SPECCHAT_GGML_UPSTREAM" in os.environ:
        return fresh_process(rows_of, path, upstream=False), upstream
    return rows_of(path), upstream


def fresh_process(rows_of, path, upstream: bool) -> np.ndarray:
    env = {k: v for k, v in os.environ.items() if k != "SPECCHAT_GGML_UPSTREAM"}
    if upstream:
        env["SPECCHAT_GGML_UPSTREAM"] = "1"
    script = (f"import json, sys\nfrom {__name__} import {rows_of.__name__}\n"
              f"print(json.dumps({rows_of.__name__}(sys.argv[1]).tolist()))")
    out = subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True,
                         text=True, timeout=300, check=True, cwd=ROOT)
    return np.array(json.loads(out.stdout), dtype=np.float32)  # float32 → JSON → float32: exact


def test_small_batch_attention_agrees_with_llama_cpps_own(bf16_gguf):
    """A 6-token verify batch after 300 tokens of context, with our kernels and with
    llama.cpp's own (SPECCHAT_GGML_UPSTREAM=1, read once per process, hence a second
    process): the logits differ by rounding only — 0.1–0.4 measured on this BF16 file,
    the size of the difference between a batch and one-token steps — and rank the same
    top token. The 306 positions span three of the kernel's ranges, so their merge is
    checked too. Planted bugs: dropping the online softmax's rescale of the sum gives
    13.0; merging the ranges without rescaling each to the common maximum gives 16.2."""
    ours, theirs = ours_and_upstream(verify_batch_logits, bf16_gguf)
    assert np.abs(ours - theirs).max() < 1.0, np.abs(ours - theirs).max()
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1)).all()


def test_a_tokens_logits_do_not_depend_on_how_far_its_batch_pads_the_cache(bf16_gguf):
    """llama.cpp pads the attended KV length to 256 past the highest cell in use, so after
    1,020 tokens a batch of 2 attends 1,024 positions and a batch of 6 attends 1,280. The
    attention kernel's ranges of positions stay the same up to 2,048, so the two tokens
    both batches share get the same logits, bit for bit. Planted bug: ranges of n_kv/8
    (the first version of the kernel) fail it."""
    backend = LlamaCppBackend(bf16_gguf, n_threads=2, max_ctx=2048)
    prompt = [int(x) for x in np.random.default_rng(1).integers(100, 40000, 1020)]
    backend.forward(prompt)
    backend.forward(prompt)  # the last prompt token again, alone: as the rollback below leaves it
    two = backend.forward(prompt + [2000, 3000], num_logits=2).numpy()
    backend.forward(prompt)  # roll back: the next batch decodes all six
    six = backend.forward(prompt + [2000, 3000, 3007, 3014, 3021, 3028], num_logits=6).numpy()[:2]
    assert np.array_equal(two, six), f"max difference {np.abs(two - six).max()}"


def matmul_rows(path) -> np.ndarray:
    """[48, V] logits of batches of every streamed width (1-8) and one tiled one (12)."""
    # attention through llama.cpp's own matmul and softmax (no flash attention): the small-batch
    # attention kernel never runs, so only the matmul patch can make the two runs differ
    backend = LlamaCppBackend(str(path), n_threads=2, max_ctx=256, flash_attn=False)
    ids = [int(x) for x in np.random.default_rng(2).integers(100, 40000, 40 + 36 + 12)]
    rows, end = [], 40
    backend.forward(ids[:end])
    for size in [1, 2, 3, 4, 5, 6, 7, 8, 12]:  # every streamed width, and one tiled batch
        end += size
        rows.append(backend.forward(ids[:end], num_logits=size).numpy())
    return np.concatenate(rows)


@pytest.mark.parametrize("gguf_type", ["F16", "BF16"])
def test_the_matmul_patch_is_bit_identical_to_llama_cpps_own_at_every_batch_width(gguf_type):
    """Batches of 1–8 tokens (the streamed matmul; 1 is llama.cpp's matrix-vector path in
    both) and one of 12 (tiled in both) give the same logits, bit for bit, with our
    kernels and with SPECCHAT_GGML_UPSTREAM=1, on F16 (the default where the CPU has no
    bf16) and BF16 files. Planted bug, shown once in a scratch build of
    ggml-cpu: a second accumulator per column in the streamed product (another summation
    order) — this fails on both files (0.05 apart on F16, 0.30 on BF16; AVX2 build,
    2026-12-02)."""
    path = converted_gguf(llama_cpp, find_gguf(), gguf_type, "target")
    ours, theirs = ours_and_upstream(matmul_rows, path)
    assert ours.shape == (48, theirs.shape[1])
    assert np.array_equal(ours, theirs), f"max difference {np.abs(ours - theirs).max()}"


def small_batch_attention_compiled() -> bool:
    """Whether the loaded build has the small-batch attention kernel: compiled for AVX-512
    (F and DQ) or AVX2 (with FMA and F16C), as the build itself says
    (specchat_flash_attn_small_batch_width, patches/llama.cpp/0002), not the CPU."""
    from specchat.loading.llamacpp import small_batch_attention_width

    return small_batch_attention_width(llama_cpp) > 0


def test_flash_attention_takes_the_small_batch_kernel_exactly_where_it_can():
    """The 6-token verify batch after 300 tokens, our build against llama.cpp's own, with
    flash attention on and the matmul bit-identical (the test above), so the attention
    alone can tell them apart. Where the kernel is compiled (AVX-512 or AVX2; head size 64 here)
    the logits must differ — by rounding, under 1.0 — else the kernel did not run; where
    it is not (a CPU with neither AVX-512 nor AVX2, an unpatched build), the fallback must
    be llama.cpp's own path, bit for bit. Planted bugs: a build whose dispatch never takes
    the kernel fails the first branch; a fallback that reordered anything fails the
    second (before the AVX2 kernel, 2026-12-02: 0.038 apart)."""
    path = converted_gguf(llama_cpp, find_gguf(), "F16", "target")
    ours, theirs = ours_and_upstream(verify_batch_logits, path)
    if small_batch_attention_compiled():
        assert 0.0 < np.abs(ours - theirs).max() < 1.0, np.abs(ours - theirs).max()
    else:
        assert np.array_equal(ours, theirs), f"max difference {np.abs(ours - theirs).max()}"


def _advised_bytes() -> int:
    """Bytes of this process's mappings advised onto transparent huge pages (VmFlags ``hg``)."""
    total = size = 0
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                total += size
    return total


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage"),
                    reason="needs a Linux kernel with transparent huge pages (reads /proc/self/smaps)")
def test_large_cpu_buffers_are_advised_onto_huge_pages(monkeypatch):
    """0004: a buffer of 4 MiB or more (the KV cache here: 30 layers × 2048 positions × K and
    V of 192 F16 values, 45 MiB; the repacked weights of a quantised file) is advised
    MADV_HUGEPAGE before its first touch: the same model opened with the patch off
    (SPECCHAT_GGML_UPSTREAM=1, read at each allocation) advises at least that much less.
    Whether the kernel backs the advice with huge pages is its business (THP "never",
    fragmentation), so the advice is what is checked. Planted bug: the patch off both
    times fails this (0 MiB apart)."""
    def advised_by_opening() -> int:
        before = _advised_bytes()
        backend = LlamaCppBackend(find_gguf(), n_threads=1, n_ctx=2048)
        grown = _advised_bytes() - before
        backend.llm.close()
        return grown

    monkeypatch.setenv("SPECCHAT_GGML_UPSTREAM", "1")
    upstream = advised_by_opening()
    monkeypatch.delenv("SPECCHAT_GGML_UPSTREAM")
    ours = advised_by_opening()
    assert ours - upstream >= 40 << 20, f"{ours >> 20} MiB advised onto huge pages against upstream's {upstream >> 20}"


@pytest.mark.parametrize("size, mode, available, expected", [
    (100, "always [madvise] never\n", 1000, True),
    (100, "[always] madvise never\n", 200, True),
    (100, "always madvise [never]\n", 1000, False),  # no huge pages to gain
    (600, "always [madvise] never\n", 1000, False),  # would not fit twice: map it, let it page
    (100, None, 1000, False),  # no THP in this kernel (or not Linux)
    (100, "always [madvise] never\n", None, False),  # memory unknown
])
def test_weights_are_read_into_memory_only_where_huge_pages_and_room_allow(size, mode, available, expected):
    """Planted bugs: ignoring "[never]", or the room check (a 6 GB file on 8 GB read into
    memory instead of mapped), fail this."""
    from specchat.engine.backends.llamacpp import read_into_memory

    assert read_into_memory(size, mode, available) is expected


def test_the_backend_opens_the_model_as_the_rule_says():
    """The rule is what the backend passes llama.cpp (use_mmap), not a helper nobody calls."""
    from specchat.engine.backends.llamacpp import weights_into_memory

    backend = LlamaCppBackend(find_gguf(), n_threads=1, n_ctx=256)
    mapped = backend.llm.model_params.load_mode == llama_cpp.LLAMA_LOAD_MODE_MMAP
    assert mapped is not weights_into_memory(find_gguf())
    backend.llm.close()
