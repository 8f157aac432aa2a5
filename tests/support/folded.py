"""The engine with its steps folded into telemetry as they pass: the engine folds none
(a chat's turn loop, serve and bench each fold what they consume), so tests that read an
engine's figures after sampling from it use this one."""

from __future__ import annotations

from specchat.engine.engine import SpeculativeEngine
from specchat.telemetry import MetricsSnapshot, Telemetry


class FoldedEngine(SpeculativeEngine):
    """``metrics``: every step so far; ``turn_metrics``: those of the last ``generate``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        gamma = self.proposer.max_speculative_tokens if self.proposer else 1
        self.telemetry, self.turn_telemetry = Telemetry(max_gamma=gamma), Telemetry(max_gamma=gamma)

    def generate(self, *args, **kwargs):
        self.turn_telemetry.reset()
        self.telemetry.start_turn()
        for step in super().generate(*args, **kwargs):
            for telemetry in (self.telemetry, self.turn_telemetry):
                telemetry.update(step.stats, len(step.tokens))
            yield step

    @property
    def metrics(self) -> MetricsSnapshot:
        return self.telemetry.snapshot()

    @property
    def turn_metrics(self) -> MetricsSnapshot:
        return self.turn_telemetry.snapshot()
