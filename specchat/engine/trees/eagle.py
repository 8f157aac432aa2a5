"""EAGLE-2-style dynamic trees for an EAGLE-3 head: each depth's new nodes run through the
head in one forward with a tree mask, a node at depth d at position last + d with its
parent's pre-norm output as g (the chain's convention, eagle.py).
"""

from __future__ import annotations

import torch

from specchat.engine.trees.grow import TreeNode, grow
from specchat.engine.sampling import SamplingParams, warp
from specchat.heads.drafter import Drafter, DrafterCache


def dynamic_tree(drafter: Drafter, cache: DrafterCache, prenorm: torch.Tensor, last: int, depth: int, width: int,
                 params: SamplingParams, generator: torch.Generator | None, draft_ids: torch.Tensor,
                 max_leaves: int | None = None) -> tuple[list[TreeNode], int]:
    """``depth`` levels of ``width`` nodes after position ``last``, whose pre-norm output is
    ``prenorm`` [1, H] (the cache holds the context up to it) → (nodes; head forwards,
    the root's logits included). The drafted rows stay in the cache: the caller truncates."""
    context_rows, forwards = cache.n, 1

    def law(out: torch.Tensor) -> torch.Tensor:
        logits = drafter.logits(out)  # [1, V_draft]
        return logits.softmax(-1) if params.greedy else warp(logits, params)

    def laws(level: list[TreeNode], nodes: list[TreeNode]) -> list[torch.Tensor]:
        nonlocal forwards
        forwards += 1
        first = cache.n
        sees = torch.zeros(len(level), first + len(level), dtype=torch.bool)
        sees[:, :context_rows] = True
        for j, v in enumerate(level):
            sees[j, first + j] = True
            a = v.parent
            while a >= 0:
                sees[j, nodes[a].state[1]] = True
                a = nodes[a].parent
        tokens = torch.cat([draft_ids[v.token] for v in level])
        g = torch.cat([nodes[v.parent].state[0] if v.parent >= 0 else prenorm for v in level])
        out = drafter.step(cache, tokens, g, [last + v.depth for v in level], sees=sees.to(g.device))
        for j, v in enumerate(level):
            v.state = (out[j:j + 1], first + j)  # its output and its row in the head's cache
        return [law(out[j:j + 1]) for j in range(len(level))]

    nodes = grow(law(prenorm), [width] * depth, params, generator, laws, max_leaves)
    return nodes, forwards
