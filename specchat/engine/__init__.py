"""The headless speculative decoding engine. Knows nothing of Textual or Rich."""

from specchat.engine.gamma.controller import AdaptiveGamma, Controller, FixedGamma
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.proposers import DraftModelProposer, NgramProposer, Proposal, Proposer
from specchat.engine.sampling import SamplingParams
from specchat.events import Alternative, Step, StepStats, Token

__all__ = [
    "AdaptiveGamma", "Alternative", "Controller", "DraftModelProposer", "FixedGamma", "NgramProposer",
    "Proposal", "Proposer", "SamplingParams", "SpeculativeEngine", "Step", "StepStats", "Token",
]
