"""``specchat replay FILE --simulate``: what a model-free proposer accepts in a recorded
chat, the engine run over the recorded greedy reply. Design notes: docs/design/bench.md"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specchat.engine.backends.base import Backend
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.factory import build_proposer
from specchat.engine.sampling import SamplingParams
from specchat.errors import SpecchatError
from specchat.events import ChatReset, ProfileSwitched, StepEvent, StepStats, TurnFinished, TurnStarted
from specchat.methods import METHODS
from specchat.telemetry import ChatTelemetry, MetricsSnapshot

GREEDY = SamplingParams(temperature=0.0)


@dataclass
class Turn:
    prompt_ids: tuple[int, ...]
    reply_ids: list[int]
    finish: str = ""


class _Recorded(Backend):
    """A target that says, at each position of a turn, the token the recording has next."""

    name = "recording"
    uses_torch_threads = False

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size  # the last id is no token: the answer past the reply's end
        self.text: list[int] = []
        self._held: list[int] = []

    @property
    def ids(self) -> list[int]:
        return self._held

    def forward(self, ids: list[int], extra: torch.Tensor | None = None, num_logits: int = 1) -> torch.Tensor:
        seq = ids + (extra.tolist() if extra is not None else [])
        logits = torch.zeros(num_logits, self.vocab_size)
        for row, position in enumerate(range(len(seq) - num_logits, len(seq))):
            # past a rejected draft a row is never read, so the recorded token serves every row
            nxt = self.text[position + 1] if position + 1 < len(self.text) else self.vocab_size - 1
            logits[row, nxt] = 1.0
        self._held = seq
        return logits

    def reset(self) -> None:
        self._held = []


def turns(events: list) -> list[Turn | None]:
    """The recorded turns in order (None where the chat was reset or the profile switched)."""
    out: list[Turn | None] = []
    for event in events:
        if isinstance(event, TurnStarted):
            out.append(Turn(event.prompt_ids, []))
        elif isinstance(event, StepEvent) and out and out[-1] is not None:
            out[-1].reply_ids += [t.id for t in event.step.tokens]
        elif isinstance(event, TurnFinished) and out and out[-1] is not None:
            out[-1].finish = event.finish_reason
        elif isinstance(event, (ChatReset, ProfileSwitched)):
            out.append(None)
    return out


def simulate(events: list, speculation, method: str, gamma: int | str,
             max_new_tokens: int | None = None) -> tuple[list[list[StepStats]], MetricsSnapshot]:
    """Each turn's simulated StepStats and the whole chat's figures, folded as live.
    ``max_new_tokens``: the recorded bound on a reply (None: unknown, then a reply that
    did not end for its length is taken as unbounded)."""
    if METHODS[method].needs:
        raise SpecchatError(f"--simulate runs model-free proposers only, not '{method}'", key="--method",
                            hint="use --method " + " or ".join(m.name for m in METHODS.values()
                                                               if m.builds and not m.needs))
    recorded = turns(events)
    if any(t is not None and not t.prompt_ids for t in recorded):
        raise SpecchatError("this recording has no prompt ids (made by an older specchat, or from a server), "
                            "so there is nothing to draft from", hint="record the chat again with this version")
    # The proposers compare ids and never read them, so the chat's ids are renumbered
    # 0..n-1: the stand-in target's logits are as wide as the tokens the chat used, not
    # as its largest id (a crafted recording's 2^31 − 1 would ask for gigabytes a row).
    seen = sorted({i for t in recorded if t is not None for i in (*t.prompt_ids, *t.reply_ids)})
    index = {token: n for n, token in enumerate(seen)}
    recorded = [None if t is None else Turn(tuple(index[i] for i in t.prompt_ids), [index[i] for i in t.reply_ids],
                                            t.finish) for t in recorded]
    backend = _Recorded(len(seen) + 1)
    proposer = build_proposer(speculation, None, gamma, None, method)
    engine = SpeculativeEngine(backend, proposer, eos_token_ids=[])  # the controller a live chat makes
    ended = ("eos", "stop")
    telemetry = ChatTelemetry(max_gamma=max(speculation.max_speculative_tokens, gamma if gamma != "auto" else 0))
    out = []
    for turn in recorded:
        if turn is None:
            engine.reset()
            continue
        backend.text = list(turn.prompt_ids) + turn.reply_ids
        telemetry.start_turn()
        steps = []
        # a reply its last token ended (EOS, a stop token) ends there again, with room to draft
        # past it as live; a last token met earlier in the reply is an ordinary one (a stop
        # string ended it), so the reply's own length ends it instead
        stopped = turn.finish in ended and bool(turn.reply_ids) and turn.reply_ids[-1] not in turn.reply_ids[:-1]
        bound = (max_new_tokens or 1 << 30) if stopped else len(turn.reply_ids)
        stops = turn.reply_ids[-1:] if stopped else []
        for step in engine.generate(list(turn.prompt_ids), GREEDY, bound, stops):
            if step.tokens:
                telemetry.update(step.stats, len(step.tokens))
                steps.append(step.stats)
        out.append(steps)
    return out, telemetry.session
