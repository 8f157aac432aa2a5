"""Each batched request's proposer (serve, bench --concurrency): a ``proposer_factory`` for
the BatchedEngine. A sequence's proposer is built once, over its lane and, for a draft model
that batches, a sequence of one batch context of the draft; a later request resets it. A
draft model that cannot batch is shared (its cache is keyed by the ids it holds: exact).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specchat.engine.factory import build_proposer
from specchat.engine.proposers import Proposer
from specchat.errors import SpecchatError
from specchat.methods import METHODS


class LaneProposers:
    def __init__(self, speculation: Any, loaded: Any, gamma: int | str | None = None, ceiling: int | None = None,
                 method: str | None = None) -> None:
        self.speculation, self.loaded = speculation, loaded
        self.gamma, self.ceiling, self.method = gamma, ceiling, method or speculation.method
        self._made: dict[int, Proposer | None] = {}
        self._drafts = None  # the draft model's batch context, opened with the first sequence that needs it

    def __call__(self, lane: Any) -> Proposer | None:
        if lane.seq in self._made:
            proposer = self._made[lane.seq]
            if proposer is not None:
                proposer.reset()  # a new request: nothing of the last one's text
            return proposer
        models = replace(self.loaded, target=lane, draft=self._draft(lane))  # this sequence's
        proposer = self._made[lane.seq] = build_proposer(self.speculation, models, self.gamma, self.ceiling,
                                                         self.method)
        return proposer

    def _draft(self, lane: Any) -> Any:
        draft = self.loaded.draft
        if METHODS[self.method].needs != "draft" or draft is None or not draft.batches:
            return draft
        if self._drafts is None:
            self._drafts = draft.open_batch(lane.context.n_seq, lane.max_length)
        return self._drafts.lane(lane.seq)

    def close(self) -> None:
        if self._drafts is not None:
            self._drafts.close()
            self._drafts = None


def check_batchable(speculation, where: str) -> None:
    """Refuses in one line (SpecchatError) what the batched engine cannot run: a method whose
    row says so, or a tree (its branches need a unified cache)."""
    method = METHODS[speculation.method]
    if not method.batched:
        raise SpecchatError(f"{where} decodes requests in one batch, which cannot run speculation.method = "
                            f"'{method.name}'", key="speculation.method",
                            hint="use method = " + " or ".join(f'"{m.name}"' for m in METHODS.values() if m.batched))
    if method.tree and speculation.siblings > 1:
        raise SpecchatError(f"{where} decodes requests in one batch, which verifies chains of drafts, not the "
                            f"tree speculation.siblings = {speculation.siblings} asks for", key="speculation.siblings",
                            hint="set siblings = 1 in the profile's [speculation] table, or chat with the "
                                 "tree one request at a time (specchat run)")
