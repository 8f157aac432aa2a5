"""Growing a draft tree where the drafter is confident, kept exact at any temperature.

EAGLE-2 (Li et al. 2024) and Medusa's candidate trees put more nodes where the drafter's
estimate of reaching them is high. Their top-k children are exact for greedy decoding
only; here every depth gets a number of new nodes (``widths``), placed one at a time on
the node whose next child is worth most, and each child is *drawn* from its parent's law
without replacement (greedy: the law's next-best id, a point mass), so recursive
rejection sampling over siblings (engine/trees/walk.py) verifies the tree exactly:

* a node's i-th child is drawn from the node's law with the i − 1 earlier children
  removed and renormalised, and that law is reported with it;
* whether a node gets another child is decided from what was drawn before — its value
  est(v) · (the mass of its law not drawn yet), est(v) the product of the drafter's
  probabilities along v's path — never from the child's own value. (Keeping a drawn child
  only if it scored well changes the law it was drawn from: tests/engine/trees/test_tree_exactness.py
  plants exactly that and fails.)

A node's law comes from ``laws(level)``, called once per depth on that depth's new nodes:
an EAGLE head runs on them (trees/eagle.py), Medusa reads its next head (medusa.py).
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
    """A tree whose depth d (1-based) gets ``widths[d-1]`` nodes, the root's children drawn
    from ``root_law`` [1, V_draft] (warped: the law drafts are sampled from; greedy: the
    drafter's softmax). ``laws(level, nodes)`` → each of a level's nodes' law (not called
    for the last depth). At most ``max_leaves`` leaves (a backend's branches): once there,
    a node may only extend a leaf. → nodes, parents before children."""
    root = TreeNode(torch.empty(0), -2, torch.empty(0), 1.0, 0)
    _give_law(root, root_law)
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
            _give_law(v, law)
        level = new
    return nodes


def _give_law(v: TreeNode, law: torch.Tensor) -> None:
    v.q, v.drawn = law, law.clone()


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
