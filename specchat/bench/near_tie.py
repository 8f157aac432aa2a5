"""When may greedy speculative decoding and greedy plain decoding disagree?

Both take the target's argmax, but from different computations of the same logits:
plain decoding runs one token per forward, verification runs k+1 tokens in one
batched forward (other matrix shapes, other summation order). In exact arithmetic the
two agree; in floating point they agree to within rounding, so greedy outputs may
differ where the top two logits are closer than that rounding: a near-tie. Anything
wider is a bug. How close is "near" depends on the precision the logits pass through:

* float32 / float64: differences come from summation order alone and stay far below
  1e-3 in logit units (unmeasurable in bf16 ULPs on SmolLM2-135M); the tolerance is
  1e-3, as it always was.
* bfloat16 / float16 compute, and 4-bit weights (bitsandbytes computes them in bf16 on
  CPU): every activation is rounded to 8 (bf16) or 11 (fp16) significant bits between
  layers, so the two computations differ by whole units in the last place (ULPs) of the
  logits. Measured on SmolLM2-135M in bf16 and in NF4 (6 prompts × 65 positions, cached
  single-token steps against 2-, 4- and 6-token verify chunks and against a fresh
  forward of the whole prefix): the top-two gap moves by a median 0.5–1, p99 3–4 and at
  most 7 ULPs of bf16 at the top logit's magnitude, and every argmax flip happened at a
  gap of 0–3 ULPs. A flip needs the gap in one computation to be within that spread,
  and the gap we report comes from a third computation (a fresh forward of the prefix),
  which can be off by the spread again: hence twice the p99 spread, **8 ULPs** of the
  16-bit format at the magnitude of the top logit (1.0 at a logit of 20 in bf16, where
  one ULP is 0.125; 0.125 in fp16).
* 8-bit (LLM.int8): activations are quantised to int8 per row and outlier columns are
  chosen per batch, so a batch changes the rounding of every row in it; measured the
  same way the gap moves by a median 2, p99 13, at most 27 bf16 ULPs, flips at gaps up
  to 6: **32 ULPs** of bf16.

A planted sampler bug (a wrongly kept draft) diverges at ordinary gaps, typically many
logit units; the statistical checks in ``specchat verify`` and the tests, not this rule,
are what catch subtle sampling bugs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

FLOAT32_TOLERANCE = 1e-3
SIXTEEN_BIT_ULPS = 8
INT8_ULPS = 32


def compute_precision(model: Any) -> str:
    """The coarsest precision the model's logits pass through: "float64", "float32",
    "bfloat16", "float16", "4bit" or "8bit" (bitsandbytes quantisation); for a backend
    its declared precision ("gguf:BF16" for llama.cpp, whose batch/one-token difference
    verify measures instead, see verify.batch_logit_noise)."""
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


def near_tie_tolerance(precision: str, top_logit: float) -> float:
    """Largest top-two logit gap at which rounding may flip an argmax between two
    computations of the same logits (see the module docstring for the derivation)."""
    dtype, ulps = ulp_unit(precision)
    if dtype is None:
        return FLOAT32_TOLERANCE
    return ulps * ulp(top_logit, dtype)


def describe_gap(gap: float, precision: str, top_logit: float) -> str:
    """e.g. "0.125 (1 ULP of bfloat16 at 20.5; near-tie ≤ 1 = 8 ULPs)"."""
    tolerance = near_tie_tolerance(precision, top_logit)
    dtype, ulps = ulp_unit(precision)
    if dtype is None:
        return f"{gap:.2e} (near-tie ≤ {tolerance:g} in {precision})"
    unit = ulp(top_logit, dtype)
    name = str(dtype).replace("torch.", "")
    return (f"{gap:.4g} ({gap / unit:.3g} ULP of {name} at {top_logit:.4g}; near-tie ≤ {tolerance:g} = {ulps} ULPs"
            + (f", {precision} weights" if precision in ("4bit", "8bit") else "") + ")")
