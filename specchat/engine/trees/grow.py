"""Growing a draft tree where the drafter is confident, kept exact at any temperature: a
node's i-th child is drawn from its law without the earlier children, and whether a node
gets another child never depends on the child's own value (docs/design/trees.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specchat.engine.sampling import SamplingParams, sample


@dataclass(eq=False)
class TreeNode:
    """``token`` its id in the drafter's vocabulary [1]; ``law`` [1, V_draft] the law it
    was drawn from (its earlier siblings removed; greedy: a point mass)."""

    token: torch.Tensor
    parent: int  # node index, -1 the root
    law: torch.Tensor
    est: float  # the drafter's probability of the whole path down to it
    depth: int
    index: int = -1
    q: torch.Tensor | None = None  # [1, V_draft] its own law, for its children
    drawn: torch.Tensor | None = None  # q with its children so far removed
    left: float = 1.0  # the mass of q not drawn yet
    children: int = 0
    state: object = None  # what the drafter keeps for it (an EAGLE head's output)


def grow(root_law: torch.Tensor, widths: list[int], params: SamplingParams, generator: torch.Generator | None,
         laws: Callable[[list[TreeNode], list[TreeNode]], list[torch.Tensor]],
         max_leaves: int | None = None) -> list[TreeNode]:
    """Nodes (parents first) of a tree whose depth d (1-based) gets ``widths[d-1]`` nodes, the
    root's children drawn from ``root_law`` [1, V_draft] (greedy: the drafter's softmax).
    ``laws(level, nodes)``: each new node's law, once per depth but the last. At most
    ``max_leaves`` leaves: once there, a node may only extend a leaf."""
    root = TreeNode(torch.empty(0), -2, torch.empty(0), 1.0, 0)
    root.q, root.drawn = root_law, root_law.clone()  # drawn: q with the children so far removed
    nodes: list[TreeNode] = []
    level, leaves = [root], 0
    for d, width in enumerate(widths, start=1):
        new: list[TreeNode] = []
        for _ in range(width):
            full = max_leaves is not None and leaves >= max_leaves
            parent = max((v for v in level if v.left > 1e-9 and not (full and (v is root or v.children))),
                         key=lambda v: v.est * v.left, default=None)
            if parent is None:
                break
            leaves += 0 if parent is not root and not parent.children else 1
            child = _draw(parent, params, generator)
            child.index = len(nodes)
            nodes.append(child)
            new.append(child)
        if not new or d == len(widths):
            break
        for v, law in zip(new, laws(new, nodes)):
            v.q, v.drawn = law, law.clone()
        level = new
    return nodes


def _draw(parent: TreeNode, params: SamplingParams, generator: torch.Generator | None) -> TreeNode:
    """The parent's next child: drawn from what is left of its law (greedy: its best id)."""
    law = parent.drawn / parent.drawn.sum()
    if params.greedy:
        pick = law.argmax(-1)
        reported = torch.zeros_like(law)
        reported[0, pick] = 1.0
    else:
        pick = sample(law, generator)
        reported = law
    p_pick = float(parent.q[0, pick])
    parent.drawn = parent.drawn.clone()
    parent.drawn[0, pick] = 0.0
    parent.left = max(0.0, parent.left - p_pick)
    parent.children += 1
    return TreeNode(pick, parent.index, reported, parent.est * p_pick, parent.depth + 1)
