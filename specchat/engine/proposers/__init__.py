"""Proposers: what drafts tokens ahead of the target (base.py holds the protocol, the draft
model and n-gram lookup; one module per other method; specchat/methods.py lists them)."""

from specchat.engine.proposers.base import Candidate, DraftModelProposer, NgramProposer, Proposal, Proposer

__all__ = ["Candidate", "DraftModelProposer", "NgramProposer", "Proposal", "Proposer"]
