"""EAGLE-2-style dynamic draft trees, kept exact at any temperature.

EAGLE-2 (Li et al. 2024) grows the draft tree where the head is confident: at each depth
it expands the nodes with the largest estimated chance of being reached and kept. Its
top-k children are exact for greedy decoding only. Here every depth gets ``width`` new
nodes, placed one at a time on the node whose next child has the largest estimated
value, and each child is *drawn* from its parent's law without replacement (greedy: the
head's next-best id, a point mass), so recursive rejection sampling over siblings
(engine/tree.py) verifies the tree exactly:

* a node's law q_v is warp(head logits at v); its i-th child is drawn from q_v with the
  i − 1 earlier children removed and renormalised, and that law is reported with it;
* whether a node gets another child is decided from what was drawn before it — the
  estimate est(v) · (mass of q_v not drawn yet), where est(v) is the product of the head's
  probabilities along v's path — never from the child's own value. (Keeping a drawn
  child only if it scored well would change the law it was drawn from.)

The head then runs once per depth on all of that depth's new nodes (a tree mask over its
KV cache: the context and each node's own ancestors), which gives their laws for the next
depth. Positions follow the chain's convention (eagle.py): a node at depth d runs at
position last + d with its parent's pre-norm output as g.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specchat.engine.sampling import SamplingParams, sample, warp
from specchat.heads.drafter import Drafter, DrafterCache


@dataclass(eq=False)
class TreeNode:
    """A drafted node: ``token`` its draft-vocabulary index [1]; ``law`` [1, V_draft] the
    law it was drawn from (its earlier siblings removed; greedy: a point mass)."""

    token: torch.Tensor
    parent: int  # node index, -1 the root
    law: torch.Tensor
    est: float  # the head's probability of the whole path down to it
    depth: int
    index: int = -1
    prenorm: torch.Tensor | None = None  # the head's output at it (None: not run)
    q: torch.Tensor | None = None  # [1, V_draft] its own law, for its children
    drawn: torch.Tensor | None = None  # q with its children so far removed
    left: float = 1.0  # the mass of q not drawn yet
    children: int = 0
    cache_row: int = -1


def dynamic_tree(drafter: Drafter, cache: DrafterCache, prenorm: torch.Tensor, last: int, depth: int, width: int,
                 params: SamplingParams, generator: torch.Generator | None, draft_ids: torch.Tensor,
                 max_leaves: int | None = None) -> tuple[list[TreeNode], int]:
    """Grows a tree of ``depth`` levels with ``width`` nodes each after position ``last``,
    whose pre-norm output is ``prenorm`` [1, H] (the cache holds the context up to it),
    with at most ``max_leaves`` leaves (a backend's branches; then only a leaf may get a
    child). → (nodes, parents before children; head forwards run, the root's logits
    included). The drafted rows stay in the cache: the caller truncates it."""
    root = TreeNode(torch.empty(0), -2, torch.empty(0), 1.0, 0, prenorm=prenorm)
    _set_law(drafter, root, params)
    nodes: list[TreeNode] = []
    context_rows = cache.n
    level, forwards, leaves = [root], 1, 0
    for d in range(1, depth + 1):
        new: list[TreeNode] = []
        for _ in range(width):
            full = max_leaves is not None and leaves >= max_leaves  # then a child must extend a leaf
            parent = max((v for v in level if v.left > 1e-9 and not (full and (v is root or v.children))),
                         key=lambda v: v.est * v.left, default=None)
            if parent is None:
                break
            leaves += 0 if parent is not root and not parent.children else 1
            child = _draw(parent, params, generator)
            child.index = len(nodes)
            nodes.append(child)
            new.append(child)
        if not new or d == depth:
            break
        _run(drafter, cache, root, new, nodes, context_rows, last, draft_ids)
        forwards += 1
        for v in new:
            _set_law(drafter, v, params)
        level = new
    return nodes, forwards


def _set_law(drafter: Drafter, v: TreeNode, params: SamplingParams) -> None:
    logits = drafter.logits(v.prenorm)  # [1, V_draft]
    v.q = logits.softmax(-1) if params.greedy else warp(logits, params)
    v.drawn = v.q.clone()


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


def _run(drafter: Drafter, cache: DrafterCache, root: TreeNode, new: list[TreeNode], nodes: list[TreeNode],
         context_rows: int, last: int, draft_ids: torch.Tensor) -> None:
    """One head forward over ``new`` (one depth), each row seeing the context and its own
    ancestors' rows."""
    first = cache.n
    sees = torch.zeros(len(new), first + len(new), dtype=torch.bool)
    sees[:, :context_rows] = True
    for j, v in enumerate(new):
        v.cache_row = first + j
        sees[j, v.cache_row] = True
        a = v.parent
        while a >= 0:
            sees[j, nodes[a].cache_row] = True
            a = nodes[a].parent
    tokens = torch.cat([draft_ids[v.token] for v in new])
    g = torch.cat([nodes[v.parent].prenorm if v.parent >= 0 else root.prenorm for v in new])
    out = drafter.step(cache, tokens, g, [last + v.depth for v in new], sees=sees.to(g.device))
    for j, v in enumerate(new):
        v.prenorm = out[j:j + 1]
