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
  logits (the spread measured on SmolLM2-135M: docs/benchmarks/why-the-numbers.md). A
  flip needs the gap in one computation to be within that spread, and the gap we report
  comes from a third computation (a fresh forward of the prefix), which can be off by
  the spread again: hence twice the p99 spread, **8 ULPs** of the 16-bit format at the
  magnitude of the top logit (1.0 at a logit of 20 in bf16, where one ULP is 0.125;
  0.125 in fp16).
* 8-bit (LLM.int8): activations are quantised to int8 per row and outlier columns are
  chosen per batch, so a batch changes the rounding of every row in it; by the same
  rule, **32 ULPs** of bf16.

* llama.cpp (``gguf:<type>``): its kernels take other code paths for a batch of tokens
  than for one (and set-up's small-batch attention accumulates in F32 where the
  one-token path uses F16), so logits move by far more than rounding. Each format's
  bound on that move is a constant, :data:`GGUF_NOISE_BOUND`, measured once on healthy
  builds (see its comment); a divergence is a near-tie within twice it.

Every bound here is a fixed constant of the format, never measured on the backend
being judged: a backend fault that corrupts batched logits would otherwise widen its
own tolerance (logits shifted one row in every batch measured a "noise" of 20 and
waved every divergence through). ``specchat verify`` measures the batched-vs-one-token
difference and fails when it exceeds :func:`noise_bound` (single.batch_logit_noise).
Why twice: greedy speculation and plain decoding part where one computation's argmax
differs from the other's, and two logits that each moved by at most b move their
difference by at most 2b — so a flip needs a gap of at most 2b.

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
    the near-tie width: see the module docstring), never a measurement of the backend
    being judged. Formats not known here get the widest gguf bound."""
    dtype, ulps = ulp_unit(precision)
    if dtype is not None:
        return ulps / 2 * ulp(magnitude, dtype)
    if precision in ("float32", "float64"):
        return FLOAT32_TOLERANCE / 2
    return GGUF_NOISE_BOUND.get(precision, DEFAULT_NOISE_BOUND)


def near_tie_tolerance(precision: str, top_logit: float) -> float:
    """Largest top-two logit gap at which rounding may flip an argmax between two
    computations of the same logits: twice :func:`noise_bound` (see the module docstring)."""
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
