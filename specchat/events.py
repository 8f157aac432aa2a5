"""The event vocabulary shared by the engine, the UI, the recorder, replay and bench: frozen,
JSON-able dataclasses that :func:`to_json` / :func:`from_json` round-trip exactly. Token
provenance (the paper's names, as vLLM's rejection sampler): ``accepted`` (a draft the target
kept), ``resampled`` (drawn from norm(max(p − q, 0)) after the first rejection), ``bonus``
(drawn from p after every draft was kept), ``target`` (a step with no drafts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


# How a reply that did not end by itself ended, in words (the transcript, the exports).
FINISH_NOTES = {"cancelled": "cancelled", "length": "stopped: max_new_tokens reached",
                "context": "stopped: context window full", "error": "stopped by an error"}


# How the rolling window's note on a message too long for the context begins (engine/
# session.py): with it, the turn has said why its reply is empty (ui/screens/chat.py).
MESSAGE_TOO_LONG = "this message and the system prompt are"


def context_full_message(prompt_tokens: int) -> str:
    """Why a turn that finished with "context" produced no token at all (one line)."""
    return (f"the prompt is {prompt_tokens:,} tokens and fills the model's context window, so nothing was "
            "generated — shorten it, or start a new chat if earlier turns fill it")


@dataclass(frozen=True)
class Alternative:
    """One of the target's most likely tokens at a position (after warping)."""

    id: int
    p: float
    text: str = ""


@dataclass(frozen=True)
class Token:
    """One emitted token and the evidence behind it: ``p`` the target's (warped) probability of
    it, ``q`` the proposer's for an accepted draft (1.0 for n-gram drafts); a ``resampled``
    token's ``rejected_*`` describe the draft rejected there. The texts are filled by the chat
    layer (the engine works in ids)."""

    id: int
    kind: str
    p: float | None = None
    q: float | None = None
    alternatives: tuple[Alternative, ...] = ()
    rejected_id: int | None = None
    rejected_p: float | None = None
    rejected_q: float | None = None
    text: str = ""
    source: str = ""  # which proposer drafted it (accepted) or the rejected draft (resampled)
    rejected_text: str = ""

    @property
    def acceptance_probability(self) -> float | None:
        """min(1, p/q) for the draft judged at this position (accepted or rejected)."""
        if self.kind == "accepted" and self.p is not None and self.q:
            return min(1.0, self.p / self.q)
        if self.kind == "resampled" and self.rejected_p is not None and self.rejected_q:
            return min(1.0, self.rejected_p / self.rejected_q)
        return None


@dataclass(frozen=True)
class StepStats:
    """What one engine step cost and achieved: times in wall-clock ms, counts in tokens, None
    where not measured or not applicable. Every field defined: docs/design/metrics.md"""

    num_speculative_tokens: int
    num_draft_tokens: int
    num_accepted_tokens: int
    alpha_sum: float = 0.0
    alpha_count: int = 0
    draft_forwards: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    total_ms: float = 0.0
    prefill_ms: float = 0.0
    prefill_tokens: int = 0
    reused_tokens: int = 0
    predicted_gain: float | None = None
    draft_catch_up_tokens: int = 0
    draft_source: str = ""
    cpu_others: float | None = None
    predicted_tokens: float | None = None
    predicted_cost: float | None = None
    recommended_gamma: int | str | None = None
    recommended_gain: float | None = None
    cost_ratio: float | None = None
    verify_cost: tuple[float, ...] = ()
    batch_size: int = 1
    marginal_ms: float | None = None
    verified_positions: int | None = None
    context_tokens: int = 0

    def __post_init__(self) -> None:
        if type(self.verify_cost) is not tuple:  # read back from JSON (a recording, bench's results) as a list
            object.__setattr__(self, "verify_cost", tuple(self.verify_cost))

    @property
    def depth(self) -> int:
        """Draft positions the step stood at: a chain's k drafts, a tree's γ depths (not its nodes)."""
        k, n = self.num_draft_tokens, self.num_accepted_tokens
        return k if self.verified_positions is None else max(n, min(k, self.num_speculative_tokens or k))


@dataclass
class DraftCounts:
    """The draft counters of some steps (vLLM's names), the one fold telemetry, serve, bench
    and verify share; rates None with nothing drafted. ``num_rejected``: drafting steps that
    ended on a rejected draft (the others drew a bonus token); ``drafted_`` /
    ``accepted_per_position[i]``: drafting steps with a draft / a kept draft at position (a
    tree's depth) i. The others defined: docs/design/metrics.md"""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_rejected: int = 0
    acceptance_histogram: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)

    def add(self, stats: StepStats) -> None:
        k, n = stats.num_draft_tokens, stats.num_accepted_tokens
        if not k:
            return
        self.num_drafts += 1
        self.num_draft_tokens += k
        self.num_accepted_tokens += n
        self.num_rejected += (min(k, n + 1) if stats.verified_positions is None else stats.verified_positions) - n
        self.acceptance_histogram += [0] * (n + 1 - len(self.acceptance_histogram))
        self.acceptance_histogram[n] += 1
        for counts, upto in ((self.drafted_per_position, stats.depth), (self.accepted_per_position, n)):
            counts[:upto] = [c + 1 for c in counts[:upto] + [0] * (upto - len(counts))]  # grown to fit

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        kept = self.accepted_per_position + [0] * len(self.drafted_per_position)
        return tuple(a / d for a, d in zip(kept, self.drafted_per_position))


@dataclass(frozen=True)
class Step:
    """One propose → verify → accept/resample/bonus round of the engine."""

    tokens: tuple[Token, ...]
    stats: StepStats
    finish_reason: str | None = None


# --- chat-level events: what the UI, the recorder and replay consume -------------


@dataclass(frozen=True)
class SessionHeader:
    """First record of a session: everything needed to interpret (and replay) it."""

    specchat_version: str
    profile: dict[str, Any]
    models: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    created: str = ""


@dataclass(frozen=True)
class LoadProgress:
    """Model loading progress; total 0 means indeterminate."""

    stage: str
    done: float = 0.0
    total: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class Loaded:
    profile_name: str
    description: str = ""


@dataclass(frozen=True)
class UserMessage:
    turn: int
    text: str


@dataclass(frozen=True)
class TurnStarted:
    """``note``: something the user should know about this turn's decoding, once (e.g.
    speculation off because a model's cache cannot roll back). ``prompt_ids``: the prompt
    as the model saw it (template and rolling window applied; empty where the source does
    not tokenise: a server), what ``replay --simulate`` drafts from."""

    turn: int
    prompt_tokens: int
    num_speculative_tokens: int | str = 0
    note: str = ""
    prompt_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class StepEvent:
    """A step of a turn, tokens carrying text. ``t`` is seconds since the turn started."""

    turn: int
    step: Step
    t: float


@dataclass(frozen=True)
class TurnFinished:
    turn: int
    finish_reason: str  # "eos", "stop", "length", "context", "cancelled" or "error"
    text: str
    metrics: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0


@dataclass(frozen=True)
class ProfileSwitched:
    name: str


@dataclass(frozen=True)
class ChatReset:
    """The user started a new chat: history cleared."""


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    turn: int | None = None


@dataclass(frozen=True)
class Notice:
    """Something the user must see that is not part of the conversation — e.g. the
    recording stopped and the chat goes on unrecorded. Shown once; never recorded."""

    message: str


EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    SessionHeader, LoadProgress, Loaded, UserMessage, TurnStarted, StepEvent, TurnFinished, ProfileSwitched, ChatReset,
    ErrorEvent, Notice)}


def to_json(event: Any) -> dict[str, Any]:
    """A JSON-able dict with a ``type`` key naming the event class."""
    data = _plain(event)
    data["type"] = type(event).__name__
    return data


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` for events, without its deep copy of every leaf: events
    hold only str, numbers, None and containers of them, and one is recorded per step
    on the engine's thread (a two-token step event: ~70 → ~40 µs here). Sequences
    become lists."""
    names = _FIELD_NAMES.get(type(value))
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _step_from(d: dict[str, Any]) -> Step:
    tokens = tuple(Token(**{**t, "alternatives": tuple(Alternative(**a) for a in t.get("alternatives", ()))})
                   for t in d["tokens"])
    return Step(tokens, StepStats(**d["stats"]), d.get("finish_reason"))


def from_json(data: dict[str, Any]) -> Any:
    """Inverse of :func:`to_json`. Raises ``ValueError`` on an unknown or malformed record."""
    data = dict(data)
    name = data.pop("type", None)
    cls = EVENT_TYPES.get(name)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event type {name!r}")
    try:
        if cls is StepEvent:
            return StepEvent(turn=data["turn"], step=_step_from(data["step"]), t=data["t"])
        if cls is TurnStarted and "prompt_ids" in data:
            data["prompt_ids"] = tuple(data["prompt_ids"])
        return cls(**data)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed {name} record: {exc}") from None
