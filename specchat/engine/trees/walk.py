"""Exact verification of a tree of drafts: recursive rejection sampling over siblings (each
child kept with probability min(1, p(x)/q(x)), else p ← norm(max(p − q, 0)); greedy: a
child is kept iff it is p's argmax). Design notes: docs/design/trees.md
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specchat.engine.sampling import residual_distribution, sample


@dataclass(frozen=True)
class TreeWalk:
    """``path`` the kept nodes from the root down; ``next_token`` the token after them
    (``bonus``: drawn at a leaf); per kept node its p and q; the last rejected sibling's
    (id, p, q), None when the walk ended at a leaf."""

    path: list[int]
    next_token: int
    bonus: bool
    p_kept: list[float]
    q_kept: list[float]
    p_next: float
    rejected: tuple[int, float, float] | None


def depths(parents: list[int] | tuple[int, ...]) -> list[int]:
    """Depth of each node (children of the root: 1)."""
    out: list[int] = []
    for parent in parents:
        out.append(1 if parent < 0 else out[parent] + 1)
    return out


def walk(p: torch.Tensor, tokens: list[int], parents: list[int] | tuple[int, ...], q: torch.Tensor | None,
         generator: torch.Generator | None, greedy: bool = False) -> TreeWalk:
    """p: [N+1, V] the target's (warped) laws: row 0 at the root, row i+1 after node i.
    tokens [N], parents [N]; q: [N, V] each node's law, or None for point masses."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    node, path, p_kept, q_kept = -1, [], [], []
    rejected = None
    while True:
        law = p[node + 1]
        kids = children.get(node, [])
        if greedy:
            best = int(law.argmax())
            kept = next((c for c in kids if tokens[c] == best), None)
            if kept is None:
                rejected = (tokens[kids[-1]], float(law[tokens[kids[-1]]]), 1.0) if kids else None
                return TreeWalk(path, best, not kids, p_kept, q_kept, float(law[best]), rejected)
            path.append(kept)
            p_kept.append(float(law[best]))
            q_kept.append(float(q[kept, best]) if q is not None else 1.0)
            node = kept
            continue
        residual = law
        for c in kids:
            x = tokens[c]
            q_c = q[c].to(law.dtype) if q is not None else None
            qx = float(q_c[x]) if q_c is not None else 1.0
            px = float(residual[x])
            u = float(torch.rand((), generator=generator, dtype=torch.float64, device=law.device))
            if u * qx < px:  # kept with probability min(1, p/q) (q(x) > 0: x was drawn from q)
                path.append(c)
                p_kept.append(float(law[x]))
                q_kept.append(qx)
                node = c
                break
            rejected = (x, float(law[x]), qx)
            if q_c is None:
                q_c = torch.zeros_like(residual)
                q_c[x] = 1.0
            residual = residual_distribution(residual[None], q_c[None])[0]
        else:
            token = int(sample(residual[None], generator)[0])
            return TreeWalk(path, token, not kids, p_kept, q_kept, float(law[token]), rejected if kids else None)
