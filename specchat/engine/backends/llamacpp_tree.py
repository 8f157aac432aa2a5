"""A tree of drafts in one llama.cpp decode: branch b (root to leaf b) is sequence b of one
unified KV cache, node i belongs to the branches through it (docs/design/backends.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.trees.walk import depths

TREE_LEAVES = 8  # leaves a tree may have: the sequences of the backend's context (llama.cpp allows 256)


def branches(parents: list[int] | tuple[int, ...]) -> tuple[list[tuple[int, ...]], int]:
    """(per node, the branches through it, ascending; the number of leaves)."""
    with_children = {parent for parent in parents if parent >= 0}
    through: list[list[int]] = [[] for _ in parents]
    leaves = [i for i in range(len(parents)) if i not in with_children]
    for b, leaf in enumerate(leaves):
        node = leaf
        while node >= 0:
            through[node].append(b)
            node = parents[node]
    return [tuple(sorted(s)) for s in through], len(leaves)


@dataclass
class TreeLayout:
    """One tree's rows: ``base`` is the position of the first depth (the context's length),
    ``seqs[i]`` node i's branches, ``positions[i]`` its position."""

    base: int
    tokens: list[int]
    seqs: list[tuple[int, ...]]
    positions: list[int]
    leaves: int

    @classmethod
    def of(cls, base: int, tokens: list[int], parents: list[int] | tuple[int, ...]) -> TreeLayout:
        seqs, leaves = branches(parents)
        if leaves > TREE_LEAVES:
            raise ValueError(f"a tree of {leaves} leaves: llama.cpp verifies at most {TREE_LEAVES} here")
        return cls(base, list(tokens), seqs, [base - 1 + d for d in depths(parents)], leaves)

    def rows(self, host: list[int], start: int) -> list[tuple[int, int, tuple[int, ...], bool]]:
        """(token, position, sequences, wants logits) for the context's new tokens (``host``
        from position ``start``; logits at the last) and then the nodes (logits each)."""
        every = tuple(range(self.leaves))
        out = [(t, start + i, every, i == len(host) - 1) for i, t in enumerate(host)]
        return out + [(t, p, s, True) for t, p, s in zip(self.tokens, self.positions, self.seqs)]

    def keep(self, llama_cpp, memory, path: list[int]) -> None:
        """After the walk: the cells of ``path`` (root down) stay, as sequence 0's; every
        other node's cells, and every branch but 0, go."""
        b = self.seqs[path[-1]][0] if path else 0
        end = self.base + len(path)  # one past the kept path's last position
        ok = True
        for s in range(self.leaves):
            if s != b:  # sequence 0 keeps the context; the others go whole
                ok &= bool(llama_cpp.llama_memory_seq_rm(memory, s, self.base if s == 0 else -1, -1))
        ok &= bool(llama_cpp.llama_memory_seq_rm(memory, b, end, -1))  # the kept branch below the path
        if b != 0:
            llama_cpp.llama_memory_seq_cp(memory, b, 0, self.base, end)
            ok &= bool(llama_cpp.llama_memory_seq_rm(memory, b, -1, -1))
        if not ok:
            raise RuntimeError("llama.cpp could not drop a tree's other branches")
