"""The end of a step for one sequence, alone or in a batch: where its tokens stop, why it
finished, its StepStats, and the error for non-finite logits."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specchat.engine.gamma.controller import Assessment
from specchat.errors import GenerationError
from specchat.events import Step, StepStats, Token


@dataclass(frozen=True)
class Settled:
    tokens: list[Token]  # what the step emits, cut after a stop or EOS token
    finish: str | None  # "eos", "stop", "length", "context" or None (the reply goes on)


def settle(ids: list[int], tokens: list[Token], produced: int, *, stops: set[int], eos: set[int],
           max_new_tokens: int, max_length: int) -> Settled:
    """Cuts ``tokens`` after the first stop or EOS token, appends what is kept to ``ids``
    (the sequence, in place) and says whether the reply finished. ``produced``: tokens the
    reply had emitted before this step; ``max_length``: the context the sequence may fill."""
    finish = None
    for i, token in enumerate(tokens):
        if token.id in stops or token.id in eos:
            finish = "eos" if token.id in eos else "stop"
            tokens = tokens[: i + 1]
            break
    ids.extend(t.id for t in tokens)
    if finish is None and produced + len(tokens) >= max_new_tokens:
        finish = "length"
    elif finish is None and len(ids) >= max_length:
        finish = "context"
    return Settled(tokens, finish)


def stats(gamma: int, k: int, n: int, alpha_sum: float, assessed: Assessment, *, alpha_count: int | None = None,
          **measured) -> StepStats:
    """The step's StepStats: γ asked, k drafted, n kept (before any stop cut), α's terms
    (alpha_count None: a chain's min(k, n + 1)), the assessment and what the engine measured."""
    return StepStats(
        num_speculative_tokens=gamma, num_draft_tokens=k, num_accepted_tokens=n,
        alpha_sum=alpha_sum, alpha_count=min(k, n + 1) if alpha_count is None else alpha_count,
        **asdict(assessed), **measured)


def ended(reason: str) -> Step:
    """A step that emits nothing and ends the reply (cancelled, no room, no budget)."""
    return Step((), StepStats(0, 0, 0), reason)


def nonfinite(whose: str, where: str) -> GenerationError:
    """The error for NaN or infinite logits from the ``whose`` model ("target", "draft")."""
    return GenerationError(
        f"the {whose} model returned non-finite logits (NaN or ±inf) {where}",
        hint="float16 overflows easily: try dtype = \"bfloat16\" or \"float32\", or another "
             "quantisation; the reply so far is kept")
