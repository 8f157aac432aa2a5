"""Pure tensor helpers: warp logits into the law we sample from (p and q alike; greedy is
the one-hot limit), sample, and the exact rejection sampler of Leviathan et al. (2023) /
Chen et al. (2023), with the coupled form for point-mass drafts (docs/design/sampling.md).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from specchat.errors import SamplingError

MAX_SEED = 2**64 - 1  # torch generators and position_uniforms take 64-bit seeds
# Below this temperature logits / T leaves float32's range for a logit float16 can hold
# (|x| ≤ 65504): the division gives ±inf (a subnormal T rounds to 0 in float32) and the
# sampler finds no token. So colder is greedy, which every T this small already is
# (its distribution is one-hot at the argmax but for exact ties).
GREEDY_BELOW = float(torch.finfo(torch.float16).max) / float(torch.finfo(torch.float32).max)


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 = greedy. top_k 0 and top_p 1.0 disable those filters.
    seed None = fresh randomness each call; an int makes generation reproducible."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        # every entry point that builds or replaces params (API, profile, CLI, UI keys)
        # passes through here, so a NaN temperature never reaches the sampler
        def bad(key: str, value: object, rule: str) -> SamplingError:
            return SamplingError(f"{key} = {value!r} is out of range", key=f"sampling.{key}", hint=rule)

        def number(x: object) -> bool:
            return isinstance(x, numbers.Real) and not isinstance(x, bool)

        def integer(x: object) -> bool:
            return isinstance(x, numbers.Integral) and not isinstance(x, bool)

        if not number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise bad("temperature", self.temperature, "use a finite number ≥ 0 (0 = greedy)")
        if not number(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", self.top_p, "use a number with 0 < top_p ≤ 1 (1 = off)")
        if not integer(self.top_k) or self.top_k < 0:
            raise bad("top_k", self.top_k, "use an integer ≥ 0 (0 = off)")
        if self.seed is not None and (not integer(self.seed) or not 0 <= self.seed <= MAX_SEED):
            raise bad("seed", self.seed, f"use an integer from 0 to {MAX_SEED}, or none for a fresh seed")

    @property
    def greedy(self) -> bool:
        """temperature 0, or one below GREEDY_BELOW (≈ 1.9e-34), which is greedy in all but ties."""
        return self.temperature < GREEDY_BELOW


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits [n, V] → probabilities [n, V] (float32 at least) after temperature,
    top-k then top-p — the order transformers applies them in."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    if params.greedy:
        # ties go to the lowest id, as torch.argmax does for plain greedy decoding
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    # every tensor below is this function's own: later steps work in place
    logits = logits / params.temperature
    vocab = logits.shape[-1]
    if 0 < params.top_k < vocab:
        kth = topk(logits, params.top_k).values[..., -1:]  # [n, 1]
        keep_at_least_(logits, kth, float("-inf"))
    probs = logits.softmax(-1)
    if params.top_p < 1.0:
        keep_at_least_(probs, nucleus_threshold(probs, params.top_p), 0.0)
        probs.div_(probs.sum(-1, keepdim=True))
    return probs


def nucleus_threshold(probs: torch.Tensor, top_p: float, first: int = 16) -> torch.Tensor:
    """θ [n, 1], the smallest probability inside each row's nucleus: transformers keeps a
    token iff the mass strictly above it is < top_p (the most likely always), i.e. iff its
    probability is ≥ θ. θ is sought among the ``first`` most likely tokens, widening
    eightfold while they hold less than top_p (sorting the whole vocabulary costs more
    than the rest of the step)."""
    vocab = probs.shape[-1]
    width = min(first, vocab)
    while True:
        top = topk(probs, width).values  # [n, w], descending
        if width == vocab or bool((top.sum(-1) >= top_p).all()):
            break
        width = min(width * 8, vocab)
    above = top.cumsum(-1) - top  # mass before each in this order (ties: see below)
    keep = above < top_p
    keep[:, 0] = True
    # with ties, a later copy of a kept value may look excluded here; the threshold keeps
    # every token as likely as the smallest kept one, which is the rule above
    return top.masked_fill(~keep, float("inf")).amin(-1, keepdim=True)


def keep_at_least_(x: torch.Tensor, threshold: torch.Tensor, fill: float) -> torch.Tensor:
    """In place: the entries of x [n, V] below their row's threshold [n, 1] become ``fill``. On
    the CPU one ``threshold_`` pass a row, cutting just below θ (x > nextafter(θ, −inf) ⟺ x ≥ θ)."""
    if x.device.type != "cpu" or x.shape[0] > 16:
        return x.masked_fill_(x < threshold, fill)
    below = torch.nextafter(threshold, torch.full_like(threshold, float("-inf"))).flatten().tolist()
    for i, cut in enumerate(below):  # x[i], not iteration: autograd allows in-place on a select view
        torch.nn.functional.threshold_(x[i], cut, fill)
    return x


def topk(x: torch.Tensor, k: int, block: int = 256) -> torch.return_types.topk:
    """torch.topk(x, k) over the last dim of x [n, V] for small k, searching only the k
    blocks of ``block`` ids with the largest maxima (they hold the k largest values): ~3×
    faster over a 50k vocabulary on a CPU. Values are exactly torch.topk's; among equal
    values the ids may differ (a row with fewer than k values above −inf may name padding
    ids ≥ V for its −inf values)."""
    n, vocab = x.shape
    blocks = -(-vocab // block)
    if k * 4 > blocks:
        return torch.topk(x, k, dim=-1)
    if vocab % block:
        x = torch.nn.functional.pad(x, (0, blocks * block - vocab), value=float("-inf"))
    grouped = x.view(n, blocks, block)
    best = grouped.amax(-1).topk(k, dim=-1).indices  # [n, k] block numbers
    candidates = grouped.gather(1, best[:, :, None].expand(n, k, block)).view(n, k * block)
    values, at = candidates.topk(k, dim=-1)
    ids = best.gather(1, at // block) * block + at % block
    return torch.return_types.topk((values, ids))


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of probs [n, V] → ids [n] (inverse CDF: several times faster than
    torch.multinomial over a 50k vocabulary on CPU, and the same law)."""
    return sample_at(probs, torch.rand(probs.shape[0], generator=generator, device=probs.device, dtype=torch.float64))


_MASK = (1 << 64) - 1


def _mix64(z: int) -> int:
    """splitmix64's finaliser: a well-mixed 64-bit hash of a 64-bit integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def position_uniforms(seed: int, start: int, n: int) -> list[float]:
    """Uniforms in [0, 1) for absolute positions start..start+n−1 of the sequence with
    this seed: splitmix64 of (seed, position), the same numbers on every device and for
    every way the positions are grouped into steps."""
    key = _mix64((seed & _MASK) ^ 0x5EC0C4A7)
    return [(_mix64((key + (j + 1) * 0x9E3779B97F4A7C15) & _MASK) >> 11) * 2.0**-53
            for j in range(start, start + n)]


def sample_at(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw per row: probs [n, V], uniforms [n] in [0, 1) → ids [n], the first whose
    cumulative mass exceeds u · total (an id of zero mass is never drawn)."""
    cdf = probs.cumsum(-1, dtype=torch.float64)  # [n, V]
    total = cdf[:, -1:]  # [n, 1]
    target = uniforms.to(device=probs.device, dtype=torch.float64)[:, None] * total  # [n, 1]
    # u·total may round up to total itself, past every id: keep it strictly below
    target = torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))
    # a NaN row (non-finite logits) would give id V, past the vocabulary: clamp it, so that
    # nothing indexes out of range before the engine's finiteness check reports the model
    ids = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # [n]
    return ids.clamp_(max=probs.shape[-1] - 1)


def on_vocab(probs: torch.Tensor, vocab: int) -> torch.Tensor:
    """probs [n, V'] → [n, vocab]: a draft's q put on the target's vocabulary. Ids past the
    draft's rows get probability 0; rows past the target's never carry mass because the
    draft only samples ids the target has (its logits are cut to ``vocab`` first)."""
    width = probs.shape[-1]
    if width >= vocab:
        return probs[..., :vocab]
    return torch.nn.functional.pad(probs, (0, vocab - width))


def on_target_vocab(q: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """A head's q [n, V_draft] → [n, vocab]: column j's mass on target id ids[j], zero elsewhere."""
    out = q.new_zeros(q.shape[0], vocab)
    out[:, ids] = q
    return out


def nonfinite_rows(logits: torch.Tensor) -> torch.Tensor:
    """[n, V] → [n] bool: rows that are no distribution (a NaN or +inf anywhere, or all −inf).
    One max per row: NaN propagates through it, +inf wins it, an all −inf row keeps −inf."""
    return ~torch.isfinite(logits.amax(-1))


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(p − q, 0)) row-wise, [k, V]; a row of no mass (p == q: no rejection there)
    is p, so sampling it stays valid (its draw is never used)."""
    residual = (p - q.to(p.dtype)).clamp_min(0.0)
    mass = residual.sum(-1, keepdim=True)  # [k, 1]
    return torch.where(mass > 0, residual / mass.clamp_min(1e-30), p)


@dataclass
class Verdict:
    """Outcome of verifying k drafts, still on the device (one sync reads it all).

    accepted: [k] whether each draft passed its own test (only the leading run counts).
    next_tokens: [k+1] the token after a first rejection at i < k (a draw from
        norm(max(p_i − q_i, 0)); coupled form: from p_i), or at k the bonus from p_k.
    alpha_terms: [k] Σ_x min(p_i(x), q_i(x)). p_draft / q_draft: [k] of each drafted token.
    """

    accepted: torch.Tensor
    next_tokens: torch.Tensor
    alpha_terms: torch.Tensor
    p_draft: torch.Tensor
    q_draft: torch.Tensor


def rejection_sample(
    p: torch.Tensor,
    q: torch.Tensor | None,
    drafts: torch.Tensor,
    generator: torch.Generator | None,
    greedy: bool = False,
    uniforms: torch.Tensor | None = None,
    draws: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Verdict:
    """Exact speculative sampling for one sequence (rule: docs/design/sampling.md).

    p: [k+1, V] target laws; q: [k, V] the drafts' laws or None (point masses); drafts: [k].
    uniforms: [k+1] per-position uniforms (:func:`position_uniforms`): with point masses,
    the coupled form. draws: ([k] acceptance, [k+1] next-token uniforms) instead of the
    generator's, so tests can read the exact law off stratified grids.
    """
    k = drafts.shape[0]
    pos = torch.arange(k, device=p.device)
    p_draft = p[pos, drafts]  # [k]
    if q is None and uniforms is not None:
        # coupled form: the target's own draw y at each position; keep x iff x == y, and
        # y is then also the token after a rejection (law: p restricted to ≠ x) or the bonus
        own = p.argmax(-1) if greedy else sample_at(p, uniforms)  # [k+1]
        return Verdict(own[:k] == drafts, own, p_draft, p_draft, torch.ones_like(p_draft))
    if q is None:
        q = torch.nn.functional.one_hot(drafts, p.shape[-1]).to(p.dtype)  # [k, V]
    q_draft = q[pos, drafts].to(p.dtype)  # [k]
    u = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype) if draws is None else draws[0].to(p)
    # u < p/q without dividing (q_draft > 0: the draft was sampled from q)
    accepted = u * q_draft < p_draft
    next_dists = torch.cat([residual_distribution(p[:k], q), p[k:]], dim=0)  # [k+1, V]
    # greedy rows are one-hot (p, or the residual of one-hot p and q): argmax is the draw
    if greedy:
        next_tokens = next_dists.argmax(-1)  # [k+1]
    else:
        next_tokens = sample(next_dists, generator) if draws is None else sample_at(next_dists, draws[1])
    alpha_terms = torch.minimum(p[:k], q.to(p.dtype)).sum(-1)  # [k]
    return Verdict(accepted, next_tokens, alpha_terms, p_draft, q_draft)
