"""``specchat verify``'s exact-law check: the law of the first token the engine's sampler
emits at the verify prompt, read off the sampler's own code on the backend's p and q,
compared with p with no sampling noise (it fails when TV > LAW_BOUND; the tree walk is not
read here). Derivation, support cut and bounds: docs/design/verify.md"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

import specchat.engine.host_sampling as host_sampling  # looked up at call time: tests plant bugs there
import specchat.engine.sampling as sampling
from specchat.verify.stats import Check

LAW_BOUND = 2e-6  # TV between the sampler's exact law and p beyond which the check fails
FIRST_CELLS = 128  # the first grid of uniforms, per draft
FINEST = 2.0**-32  # cells are halved until this narrow
MAX_IDS = 128  # the widest support read whole
LAST = float(np.nextafter(1.0, 0.0))  # the largest uniform below 1
UNIT_ROUNDOFF = 2.0**-24  # float32's, the dtype p, q and the residual are computed in


def healthy_tv(ids: int) -> float:
    """The TV a healthy sampler's reading over ``ids`` ids can show: float32 rounding of
    sums over them (√ids · u) plus the reading's own error (2^-33 per change of output)."""
    return ids**0.5 * UNIT_ROUNDOFF + ids * FINEST / 2


@dataclass(frozen=True)
class LawReading:
    """One sampler path's exact law of the first emitted token, on ``ids`` (vocabulary ids
    of the columns read): ``law`` and ``expected`` (p) [W] float64; ``uniforms``: sampler
    evaluations the reading took; ``restricted``: the support was cut to MAX_IDS ids."""

    path: str
    law: torch.Tensor
    expected: torch.Tensor
    ids: torch.Tensor
    uniforms: int
    restricted: bool = False

    @property
    def tv(self) -> float:
        return 0.5 * float((self.law - self.expected).abs().sum())


def read_law(evaluate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], lanes: int,
             outputs: int) -> tuple[torch.Tensor, int]:
    """The law of each lane's output over u ~ U[0, 1): [lanes, outputs] float64, and the
    number of evaluations. ``evaluate(lane [n], u [n] float64) → output ids [n]`` must be
    piecewise constant in u (docs/design/verify.md)."""
    n = FIRST_CELLS
    grid = torch.arange(n + 1, dtype=torch.float64) / n  # cell ends; the last (1) evaluated at LAST
    lane = torch.arange(lanes).repeat_interleave(n + 1)
    ends = evaluate(lane, grid.clamp(max=LAST).repeat(lanes)).view(lanes, n + 1)
    evaluations = lanes * (n + 1)
    lo, hi = grid[:-1].repeat(lanes), grid[1:].repeat(lanes)
    f_lo, f_hi = ends[:, :-1].flatten(), ends[:, 1:].flatten()
    cell = torch.arange(lanes).repeat_interleave(n)
    law = torch.zeros(lanes, outputs, dtype=torch.float64)
    while True:
        same = f_lo == f_hi
        law.index_put_((cell[same], f_lo[same]), (hi - lo)[same], accumulate=True)
        split = ~same
        if not bool(split.any()):
            return law, evaluations
        lo, hi, f_lo, f_hi, cell = lo[split], hi[split], f_lo[split], f_hi[split], cell[split]
        if float((hi - lo).max()) <= FINEST:  # as fine as the reading goes: half to each end
            law.index_put_((cell, f_lo), (hi - lo) / 2, accumulate=True)
            law.index_put_((cell, f_hi), (hi - lo) / 2, accumulate=True)
            return law, evaluations
        mid = (lo + hi) / 2
        f_mid = evaluate(cell, mid)
        evaluations += mid.numel()
        lo, hi = torch.cat([lo, mid]), torch.cat([mid, hi])
        f_lo, f_hi = torch.cat([f_lo, f_mid]), torch.cat([f_mid, f_hi])
        cell = torch.cat([cell, cell])


def _columns(p: torch.Tensor, q: torch.Tensor | None, keep: int | None) -> tuple[torch.Tensor, bool]:
    """The ids to read on, ascending: where p or q has mass, or, past MAX_IDS of them, the
    MAX_IDS likeliest (``keep`` always among them: a point-mass draft, q's likeliest id); and
    whether cut."""
    mass = p.double() if q is None else torch.maximum(p.double(), q.double())
    if keep is not None:
        mass = mass.clone()
        mass[keep] = float("inf")  # that column, with mass or not
    support = torch.nonzero(mass > 0).flatten()
    if support.numel() <= MAX_IDS:
        return support, False
    ids = torch.topk(mass, min(MAX_IDS, mass.numel())).indices
    return ids.sort().values, support.numel() > MAX_IDS


def _normalised(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / x.sum()


def draft_law(p: torch.Tensor, q: torch.Tensor, greedy: bool) -> LawReading:
    """rejection_sample's first token for a draft x ~ q: p, q [V] (p in the engine's dtype)."""
    q = q.to(p.device)
    ids, restricted = _columns(p, q, int(q.argmax()))
    p_u = p[ids] if not restricted else (p[ids] / p[ids].sum())
    q_u = (q[ids] if not restricted else q[ids] / q[ids].sum()).to(p.dtype)
    width = ids.numel()
    drafts = torch.nonzero(q_u > 0).flatten()  # [L] the lanes: every id the draft can propose

    def verdict(lane: torch.Tensor, u_accept: torch.Tensor, u_next: torch.Tensor):
        k, device = lane.numel(), p.device
        rows = p_u.expand(k + 1, width)  # [k+1, W]; row k (the bonus position) is not read
        u_next = torch.cat([u_next, u_next.new_full((1,), 0.5)])
        return sampling.rejection_sample(rows, q_u.expand(k, width), drafts[lane.to(device)], None, greedy=greedy,
                                         draws=(u_accept.to(device), u_next.to(device)))

    def accepted(lane, u):
        return verdict(lane, u, torch.full_like(u, 0.5)).accepted.long().cpu()

    def next_token(lane, u):
        return verdict(lane, torch.full_like(u, 0.5), u).next_tokens[:-1].cpu()

    keep, n_keep = read_law(accepted, drafts.numel(), 2)
    kept = keep[:, 1]  # [L] A(x)
    weights = _normalised(q_u[drafts]).cpu()  # [L] the law of the draft
    law = torch.zeros(width, dtype=torch.float64).index_add_(0, drafts.cpu(), weights * kept)
    # the draw after a rejection, for the drafts that can be rejected (p < q: about half)
    rejectable = torch.nonzero(kept < 1).flatten()
    after, n_after = read_law(lambda lane, u: next_token(rejectable[lane], u), rejectable.numel(), width)
    law += (weights[rejectable] * (1 - kept[rejectable])) @ after  # [W]
    return LawReading("rejection sampler, draft q", law, _normalised(p_u).cpu(), ids.cpu(), n_keep + n_after,
                      restricted)


def coupled_law(p: torch.Tensor, draft: int, greedy: bool) -> LawReading:
    """rejection_sample's coupled point-mass form: the first token after a point-mass draft."""
    ids, restricted = _columns(p, None, draft)
    p_u = p[ids] if not restricted else (p[ids] / p[ids].sum())
    width, x = ids.numel(), torch.nonzero(ids == draft).flatten()

    def first(lane, u):
        k = lane.numel()
        v = sampling.rejection_sample(p_u.expand(k + 1, width), None, x.expand(k), None, greedy=greedy,
                                      uniforms=torch.cat([u, u.new_full((1,), 0.5)]).to(p.device))
        return torch.where(v.accepted, x.expand(k), v.next_tokens[:-1]).cpu()

    law, n = read_law(first, 1, width)
    return LawReading("coupled point-mass draw, torch", law[0], _normalised(p_u).cpu(), ids.cpu(), n, restricted)


def host_law(logits: torch.Tensor, draft: int, params: sampling.SamplingParams) -> LawReading:
    """host_sampling.verify_point_mass (point-mass steps with logits in host memory) on the
    backend's logits [V]: its first token after a point-mass draft, against warp's p."""
    logits = logits.cpu().float() if logits.dtype in (torch.float16, torch.bfloat16) else logits.cpu()
    p = sampling.warp(logits[None], params)[0]
    ids, restricted = _columns(p, None, draft)
    if restricted or params.top_p >= 1.0:
        # the other ids dropped, as if their logits were −inf: without top-p that leaves p as it
        # was (top-k keeps the same ids, and softmax gives them the same shares), and a cut
        # support's p is warp's law of what is left
        logits = logits[ids]
        p, ids_in_row = sampling.warp(logits[None], params)[0], torch.arange(ids.numel())
    else:  # the whole row, as the backend gave it: top-p's nucleus depends on every id's mass
        ids_in_row = ids
    row = logits.numpy()
    column = torch.full((row.shape[-1],), -1, dtype=torch.long)  # row position → column read (−1: none)
    column[ids_in_row] = torch.arange(ids.numel())
    x = int(ids_in_row[ids == draft][0])  # the draft, as a position in the row

    def first(lane, u):
        k = lane.numel()
        rows = np.broadcast_to(row, (k + 1, row.shape[-1]))
        v = host_sampling.verify_point_mass(rows, [x] * k, params, u.tolist() + [0.5], width=1)
        emitted = [x if a else y for a, y in zip(v.accepted, v.next_tokens[:k])]
        out = column[torch.tensor(emitted, dtype=torch.long)]
        return torch.where(out >= 0, out, ids.numel())  # an id outside p's columns: the extra output

    law, n = read_law(first, 1, ids.numel() + 1)
    expected = torch.cat([_normalised(p[ids_in_row]), torch.zeros(1, dtype=torch.float64)])
    return LawReading("coupled point-mass draw, numpy host", law[0], expected, torch.cat([ids, torch.tensor([-1])]),
                      n, restricted)


def law_check(reading: LawReading) -> Check:
    """One line: the TV against the bound, and on FAIL the token with the largest error."""
    error = reading.law - reading.expected
    j = int(error.abs().argmax())
    token, expected, got = int(reading.ids[j]), float(reading.expected[j]), float(reading.law[j])
    tv = reading.tv
    scope = (f"exact law over {reading.uniforms:,} uniforms, {reading.ids.numel()} ids"
             + (f" (the support cut to its {MAX_IDS} likeliest)" if reading.restricted else ""))
    name = f"exact law of the first token ({reading.path})"
    extra = {"tv": tv, "bound": LAW_BOUND, "uniforms": reading.uniforms, "ids": reading.ids.numel(),
             "restricted": reading.restricted, "largest": {"token": token, "expected": expected, "got": got}}
    where = "a token outside p's support" if token < 0 else f"token {token}"
    if tv > LAW_BOUND:
        return Check(name, False, detail=f"TV {tv:.2g} exceeds the bound {LAW_BOUND:g}; largest error at {where}: "
                                         f"expected {expected:.9f}, got {got:.9f} — {scope}", extra=extra)
    return Check(name, True, detail=f"TV {tv:.2g} within the bound {LAW_BOUND:g} — {scope}", extra=extra)


def law_checks(logits: torch.Tensor, p: torch.Tensor, q: torch.Tensor | None, draft: int | None,
               params: sampling.SamplingParams) -> list[Check]:
    """The exact-law checks for the proposer's kind of draft at the verify prompt: logits
    and p [V] the target's there (p = warp(logits), the engine's dtype); q [V] the law of
    the first draft, None for a point-mass draft ``draft`` (or a proposer that drafts
    nothing there: then the plain step's draw is read, with p's argmax as the draft)."""
    if q is not None:
        return [law_check(draft_law(p, q, params.greedy))]
    x = draft if draft is not None else int(p.argmax())
    checks = [law_check(coupled_law(p, x, params.greedy))]
    if logits.device.type == "cpu":  # where the engine verifies point-mass drafts in numpy
        checks.append(law_check(host_law(logits, x, params)))
    return checks
