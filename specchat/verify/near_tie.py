"""When may greedy speculative and greedy plain decoding disagree? Only at a near-tie: the
top two logits within a fixed constant of the format (:func:`near_tie_tolerance`), never
measured on the backend judged; anything wider is a bug. ``specchat verify`` fails when
batched-vs-one-token noise exceeds :func:`noise_bound`. Design notes: docs/design/verify.md"""

from __future__ import annotations

import math
from typing import Any

import torch

FLOAT32_TOLERANCE = 1e-3
SIXTEEN_BIT_ULPS = 8
INT8_ULPS = 32

# llama.cpp: the largest |Δ logit| between a batched forward (verify's k+1 tokens, drafts
# passed after a rollback, as verification runs them) and one-token steps that a healthy
# build shows, per GGUF format, in logits: the worst measured on AVX2 and AVX-512 with
# room (≈1.3-1.5×) for prompts not measured (docs/benchmarks/why-the-numbers.md, made by
# scripts/measure-batch-noise.py).
GGUF_NOISE_BOUND = {
    "gguf:F32": 0.05,
    "gguf:F16": 0.1,
    "gguf:BF16": 0.5,
    "gguf:Q8_0": 2.0,
    "gguf:Q4_1": 3.0,
    "gguf:Q4_0": 2.0,
    "gguf:Q6_K": 2.0,
    "gguf:Q4_K_M": 2.5,
    "gguf:Q5_K_M": 4.5,
}
# A format not in the table (llama.cpp has more): the widest healthy bound above, so a
# sound build of it does not fail, while a fault that moves logits by whole units (rows
# shifted in a batch measured 20-34) still does.
DEFAULT_NOISE_BOUND = max(GGUF_NOISE_BOUND.values())


def compute_precision(model: Any) -> str:
    """The coarsest precision the model's logits pass through: "float64", "float32",
    "bfloat16", "float16", "4bit" or "8bit" (bitsandbytes quantisation); for a backend
    its declared precision ("gguf:BF16" for llama.cpp, whose bound is GGUF_NOISE_BOUND)."""
    declared = getattr(model, "precision", None)
    if isinstance(declared, str):  # a backend (specchat.engine.backends) says what it computes in
        return "4bit" if declared.startswith("4bit") else declared
    quant = getattr(getattr(model, "config", None), "quantization_config", None)
    if quant is not None:
        get = quant.get if isinstance(quant, dict) else lambda key, default=None: getattr(quant, key, default)
        if get("load_in_8bit", False):
            return "8bit"
        if get("load_in_4bit", False):
            return "4bit"
    dtype = next(model.parameters()).dtype
    return str(dtype).replace("torch.", "")


def ulp(magnitude: float, dtype: torch.dtype) -> float:
    """One unit in the last place of ``dtype`` at |magnitude| (the spacing of its values there)."""
    eps = torch.finfo(dtype).eps  # spacing just above 1.0
    return eps * 2.0 ** math.floor(math.log2(max(abs(magnitude), torch.finfo(dtype).tiny)))


def ulp_unit(precision: str) -> tuple[torch.dtype | None, int]:
    """(the 16-bit format whose ULPs measure a gap, how many of them make a near-tie),
    or (None, 0) for float32 / float64, which use an absolute tolerance."""
    if precision == "8bit":
        return torch.bfloat16, INT8_ULPS
    if precision == "float16":
        return torch.float16, SIXTEEN_BIT_ULPS
    if precision in ("bfloat16", "4bit"):
        return torch.bfloat16, SIXTEEN_BIT_ULPS
    return None, 0


def noise_bound(precision: str, magnitude: float) -> float:
    """The largest |Δ logit| between batched and one-token logits that a healthy build of
    ``precision`` shows, for logits up to |magnitude|: a fixed constant of the format (half
    the near-tie width: docs/design/verify.md), never a measurement of the backend
    being judged. Formats not known here get the widest gguf bound."""
    dtype, ulps = ulp_unit(precision)
    if dtype is not None:
        return ulps / 2 * ulp(magnitude, dtype)
    if precision in ("float32", "float64"):
        return FLOAT32_TOLERANCE / 2
    return GGUF_NOISE_BOUND.get(precision, DEFAULT_NOISE_BOUND)


def near_tie_tolerance(precision: str, top_logit: float) -> float:
    """Largest top-two logit gap at which rounding may flip an argmax between two
    computations of the same logits: twice :func:`noise_bound` (docs/design/verify.md)."""
    return 2 * noise_bound(precision, top_logit)


def describe_gap(gap: float, precision: str, top_logit: float) -> str:
    """e.g. "0.125 (1 ULP of bfloat16 at 20.5; near-tie ≤ 1 = 8 ULPs)"; the bound named is
    the one the verdict uses."""
    tolerance = near_tie_tolerance(precision, top_logit)
    dtype, ulps = ulp_unit(precision)
    if dtype is None and precision in ("float32", "float64"):
        return f"{gap:.2e} (near-tie ≤ {tolerance:g} in {precision})"
    if dtype is None:
        known = "" if precision in GGUF_NOISE_BOUND else ", a format without a measured bound"
        return (f"{gap:.4g} (near-tie ≤ {tolerance:g} = twice the batched-vs-one-token bound "
                f"{noise_bound(precision, top_logit):g} of {precision}{known})")
    unit = ulp(top_logit, dtype)
    name = str(dtype).replace("torch.", "")
    return (f"{gap:.4g} ({gap / unit:.3g} ULP of {name} at {top_logit:.4g}; near-tie ≤ {tolerance:g} = {ulps} ULPs"
            + (f", {precision} weights" if precision in ("4bit", "8bit") else "") + ")")
