"""The coupled verification of point-mass drafts on the host, in numpy: sampling.py's law
from logits in host memory, p_i built only on its support (docs/design/sampling.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from specchat.engine.sampling import SamplingParams

FIRST_SHARE = 1e-4  # candidates for the nucleus first: ids with p ≥ this; then /64 each widening
BLOCK = 256  # the inverse CDF sums blocks of this many ids first, then runs within one block
NEAR = (4.0, 8.0, 12.0, 16.0)  # top-k looks first among the ids this close (in logits) to the largest


@functools.lru_cache(maxsize=4)
def every_id(vocab: int) -> np.ndarray:
    """0..vocab-1, made once: the support of a row that temperature alone shapes."""
    ids = np.arange(vocab)
    ids.flags.writeable = False
    return ids


@dataclass
class HostVerdict:
    """One verification as Python values: next_tokens [k+1] y_i, the target's own draw at
    each position; p_next [k+1] p_i(y_i); accepted [k] x_i == y_i; p_draft [k] p_i(x_i);
    alternatives [k+1] up to ``width`` most likely (id, p); nonfinite: a row was no law."""

    next_tokens: list[int]
    p_next: list[float]
    accepted: list[bool]
    p_draft: list[float]
    alternatives: list[list[tuple[int, float]]]
    nonfinite: bool = False


def verify_point_mass(logits: np.ndarray, drafts: list[int], params: SamplingParams,
                      uniforms: list[float], width: int = 5) -> HostVerdict:
    """logits [k+1, V] (float32 or float64) on the host, drafts [k], uniforms [k+1] in [0, 1)."""
    rows = support(logits, params)
    if rows is None:
        return HostVerdict([], [], [], [], [], nonfinite=True)
    next_tokens, p_next, alternatives = [], [], []
    for (ids, probs), u in zip(rows, uniforms):
        j = draw(probs, u) if not params.greedy else 0
        next_tokens.append(int(ids[j]))
        p_next.append(float(probs[j]))
        alternatives.append([(int(ids[i]), float(probs[i])) for i in most_likely(probs, width)])
    p_draft = [probability(ids, probs, x) for (ids, probs), x in zip(rows, drafts)]
    accepted = [x == y for x, y in zip(drafts, next_tokens)]
    return HostVerdict(next_tokens, p_next, accepted, p_draft, alternatives)


def support(logits: np.ndarray, params: SamplingParams) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """warp(logits) row by row as (ids ascending, probabilities), each row's support only;
    None when a row is no distribution (as sampling.nonfinite_rows)."""
    top = logits.max(-1)  # NaN propagates, +inf wins, an all −inf row stays −inf
    if not np.isfinite(top).all():
        return None
    if params.greedy:
        # ties go to the lowest id, as argmax (and warp) has it
        return [(np.array([i]), np.ones(1, dtype=logits.dtype)) for i in logits.argmax(-1).tolist()]
    vocab = logits.shape[-1]
    # max(l / T) = max(l) / T: rounding is monotone
    peaks = top / params.temperature
    if 0 < params.top_k < vocab:
        # top-k first: only the ids it keeps are scaled and exponentiated (on Qwen's vocabulary
        # the whole row's were a third of a plain step's host time); the same values as below
        rows = []
        for row, peak, high in zip(logits, peaks, top):
            ids, s = top_k(row, high, params.top_k, params.temperature)
            w = np.exp(s - peak)  # exp(s − max s): the unnormalised softmax on them
            total = float(w.sum())
            if params.top_p < 1.0:
                inside = nucleus(w, total, params.top_p)
                ids, w = ids[inside], w[inside]
            rows.append((ids, w / w.sum()))
        return rows
    scaled = logits / params.temperature  # in the logits' dtype, rounded as warp's torch division is
    # without top-k the scaled logits are not read again, so their buffer takes the weights
    weights = np.subtract(scaled, peaks[:, None], out=scaled)
    np.exp(weights, out=weights)  # exp(s − max s): the unnormalised softmax
    rows = []
    for w in weights:
        total = float(w.sum())
        if params.top_p < 1.0:
            ids = nucleus(w, total, params.top_p)
        else:  # temperature alone: the whole vocabulary, kept as it is (no index array)
            w /= total
            rows.append((every_id(vocab), w))
            continue
        kept = w[ids]
        rows.append((ids, kept / kept.sum()))
    return rows


def top_k(row: np.ndarray, high: float, k: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """(ids ascending, their scaled logits l / T) of top-k on the scaled row (ties with the
    k-th stay, as in warp), sought among the ids within NEAR of the row's largest logit
    ``high`` (dividing by T is monotone: ids below the cut scale below it), else the whole
    row: 75 µs a row against 620 µs on Qwen's 151,936 ids."""
    for width in NEAR:
        cut = row.dtype.type(high - width)
        near = np.flatnonzero(row >= cut)
        if len(near) < k:
            continue
        s = row[near] / temperature  # rounded as the whole row's division rounds each value
        floor = np.partition(s, len(s) - k)[len(s) - k]
        if cut / temperature < floor:
            kept = s >= floor
            return near[kept], s[kept]
        break
    s = row / temperature
    floor = np.partition(s, len(s) - k)[len(s) - k]
    ids = np.flatnonzero(s >= floor)
    return ids, s[ids]


def nucleus(weights: np.ndarray, total: float, top_p: float) -> np.ndarray:
    """The ids (ascending) whose weight is ≥ θ, the smallest in the nucleus (sampling.nucleus_threshold's rule)."""
    share = FIRST_SHARE
    while True:
        candidates = np.flatnonzero(weights >= total * share) if share > 0 else np.flatnonzero(weights > 0)
        values = weights[candidates]
        if share == 0 or float(values.sum(dtype=np.float64)) >= top_p * total:
            break  # the nucleus ends among them, so no id outside reaches θ
        share = share / 64 if share > 1e-12 else 0.0
    ordered = np.sort(values)[::-1]
    above = np.cumsum(ordered, dtype=np.float64) - ordered  # mass before each, most likely first
    inside = above < top_p * total
    inside[0] = True
    theta = ordered[inside].min()  # ties with θ stay, wherever the sort put them
    return candidates[values >= theta]


def draw(probs: np.ndarray, u: float) -> int:
    """Inverse CDF over the support (ascending ids), as sampling.sample_at draws; a wide
    support in two levels (the block holding the target mass, then the entry within it):
    a tenth of the passes, the sums differing from one running sum in the last bits only."""
    n = len(probs)
    if n <= 4 * BLOCK:
        cdf = np.cumsum(probs, dtype=np.float64)
        total = cdf[-1]
        target = min(u * total, np.nextafter(total, 0.0))
        return min(int(np.searchsorted(cdf, target, side="right")), n - 1)
    full = n - n % BLOCK
    sums = probs[:full].reshape(-1, BLOCK).sum(axis=1, dtype=np.float64)
    if full < n:
        sums = np.append(sums, probs[full:].sum(dtype=np.float64))
    ends = np.cumsum(sums)
    total = ends[-1]
    target = min(u * total, np.nextafter(total, 0.0))
    block = min(int(np.searchsorted(ends, target, side="right")), len(ends) - 1)
    start = block * BLOCK
    inner = np.cumsum(probs[start:start + BLOCK], dtype=np.float64) + (ends[block - 1] if block else 0.0)
    return min(start + int(np.searchsorted(inner, target, side="right")), n - 1)


def most_likely(probs: np.ndarray, width: int) -> np.ndarray:
    """Indices of the ``width`` largest entries, largest first, without sorting a wide support."""
    if len(probs) > width:
        # the few ids within 1/1000 of the most likely hold the top, if there are enough
        near = np.flatnonzero(probs >= probs.max() * 1e-3)
        pool = near if len(near) >= width else np.argpartition(-probs, width - 1)[:width]
        return pool[np.argsort(-probs[pool], kind="stable")[:width]]
    return np.argsort(-probs, kind="stable")


def probability(ids: np.ndarray, probs: np.ndarray, token: int) -> float:
    at = int(np.searchsorted(ids, token))
    return float(probs[at]) if at < len(ids) and ids[at] == token else 0.0
