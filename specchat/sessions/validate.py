"""Field types of a recorded event, checked before the event is built from it: a recording is
untrusted, and a bad field must stop the reader at its line with a reason naming it, never reach
the replay, the exports or the panel as an exception. The rules: the events' own type hints, and
the few bounds the figures rely on.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from typing import Any

from specchat.config.model import MAX_SPECULATIVE_TOKENS, MAX_TREE_NODES
from specchat.sanitize import clean
from specchat.events import EVENT_TYPES, Alternative, StepStats, Token, TurnFinished, TurnStarted
from specchat.telemetry import MetricsSnapshot

_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null",
          dict: "an object", list: "an array"}


class FieldError(ValueError):
    """One bad field: ``str()`` is e.g. ``field 'step.tokens[0].text' must be a string, not an integer (5)``."""


def check_record(data: dict[str, Any]) -> None:
    """Raises :class:`FieldError` for the first field of a recorded event (``type``
    included, reserved keys removed) whose type or bound is wrong."""
    kind = data.get("type")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FieldError(f"unknown event type {_short(kind)}")
    _check_dataclass({k: v for k, v in data.items() if k != "type"}, cls, "")


def check_timestamp(ts: Any, previous: float | None) -> float | None:
    """A line's ``ts``: absent, or finite seconds not before the previous line's."""
    if ts is None:
        return None
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise FieldError(f"field 'ts' must be a finite number of seconds, not {_describe(ts)}")
    if previous is not None and ts < previous:
        raise FieldError(f"field 'ts' goes back in time ({ts} after {previous})")
    return float(ts)


_hints = cache(typing.get_type_hints)  # a dataclass's field types, resolved once


def _check_dataclass(value: Any, cls: type, where: str, *, partial: bool = False) -> None:
    """``partial``: keys may be missing or unknown (snapshots that grow new figures)."""
    if not isinstance(value, dict):
        raise FieldError(f"field '{where or cls.__name__}' must be an object, not {_describe(value)}")
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        path = _join(where, f.name)
        if f.name in value:
            _check(value[f.name], hints[f.name], path)
        elif not partial and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise FieldError(f"field '{path}' is missing")
    if not partial:
        for key in value:
            if key not in hints:
                raise FieldError(f"{cls.__name__} has an unknown field {_short(key)}")
    rule = _RULES.get(cls)
    if rule is not None:
        rule(value, where)


def _check(value: Any, hint: Any, where: str) -> None:
    if hint is Any:
        return
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        for arm in arms:
            try:
                _check(value, arm, where)
                return
            except FieldError:
                continue
        expected = " or ".join(_NAMES.get(typing.get_origin(a) or a, getattr(a, "__name__", str(a))) for a in arms)
        raise FieldError(f"field '{where}' must be {expected}, not {_describe(value)}")
    if origin is tuple:
        if not isinstance(value, list):
            raise FieldError(f"field '{where}' must be an array, not {_describe(value)}")
        (item, _ellipsis) = typing.get_args(hint)
        for i, element in enumerate(value):
            _check(element, item, f"{where}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise FieldError(f"field '{where}' must be an object, not {_describe(value)}")
        key_type, value_type = typing.get_args(hint)
        for key, element in value.items():
            if key_type is int and not key.lstrip("-").isdigit():
                raise FieldError(f"field '{where}' has key {_short(key)}, expected a whole number")
            _check(element, value_type, f"{where}.{key}")
        return
    if dataclasses.is_dataclass(hint):
        _check_dataclass(value, hint, where)
        return
    if not _is(value, hint):
        raise FieldError(f"field '{where}' must be {_NAMES.get(hint, hint.__name__)}, not {_describe(value)}")


def _is(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _metrics(value: dict[str, Any], where: str) -> None:
    """``TurnFinished.metrics``: the engine's snapshots under "turn" and "session",
    which the panel and the exports read as figures."""
    for key in ("turn", "session"):
        if key in value.get("metrics", {}):
            figures = value["metrics"][key]
            _check_dataclass(figures, MetricsSnapshot, _join(where, f"metrics.{key}"), partial=True)
            if isinstance(figures, dict):
                _recommended(figures.get("best_gamma"), _join(where, f"metrics.{key}.best_gamma"))
                if figures.get("verdict") not in (None, "pays", "does not pay"):
                    raise FieldError(f"field '{_join(where, f'metrics.{key}.verdict')}' must be \"pays\", "
                                     f"\"does not pay\" or null, not {_describe(figures['verdict'])}")


def check_step_stats(value: Any, where: str) -> None:
    """A step's figures from any file (a recording's step, bench's results.json): their
    types, then what the figures must say of each other; raises :class:`FieldError`."""
    _check_dataclass(value, StepStats, where)  # its rule (_RULES) included


def _step_stats(value: dict[str, Any], where: str) -> None:
    # Telemetry sizes its histogram by these counts and indexes it by the accepted one.
    # A tree's drafts (num_draft_tokens) may outnumber γ: up to siblings nodes a depth.
    gamma, drafted, accepted = [value.get(k, 0) for k in ("num_speculative_tokens", "num_draft_tokens",
                                                          "num_accepted_tokens")]
    positions = value.get("verified_positions")
    if not all(0 <= c <= MAX_SPECULATIVE_TOKENS for c in (gamma, accepted)) or not 0 <= drafted <= MAX_TREE_NODES:
        raise FieldError(f"field '{where}': draft counts must be between 0 and {MAX_SPECULATIVE_TOKENS} "
                         f"({MAX_TREE_NODES} drafts for a tree)")
    if positions is not None and not accepted <= positions <= accepted + 1:
        raise FieldError(f"field '{_join(where, 'verified_positions')}' must be the accepted count or one more")
    if accepted > drafted:
        raise FieldError(f"field '{where}': {accepted} drafts accepted of {drafted} proposed")
    _recommended(value.get("recommended_gamma"), _join(where, "recommended_gamma"))
    # the cost model's answers are shown as speed-ups: finite, and a time above zero
    for key, low, strict in (("predicted_tokens", 0.0, False), ("predicted_cost", 0.0, True),
                             ("recommended_gain", 0.0, False), ("marginal_ms", 0.0, False), ("cost_ratio", 0.0, False)):
        x = value.get(key)
        if x is not None and not (math.isfinite(x) and (x > low if strict else x >= low)):
            raise FieldError(f"field '{_join(where, key)}' must be a finite number {'above' if strict else 'at least'} "
                             f"{low:g}, not {_describe(x)}")
    verify = value.get("verify_cost", [])
    if len(verify) > MAX_TREE_NODES or not all(math.isfinite(v) and v >= 1.0 for v in verify):
        raise FieldError(f"field '{_join(where, 'verify_cost')}' must hold at most {MAX_TREE_NODES} finite "
                         "ratios of at least 1")
    if not 0 <= value.get("context_tokens", 0) < 2**31:
        raise FieldError(f"field '{_join(where, 'context_tokens')}' must be a token count between 0 and 2^31 − 1")
    if not 1 <= value.get("batch_size", 1) <= 4096:
        raise FieldError(f"field '{_join(where, 'batch_size')}' must be between 1 and 4096")


def _turn_started(value: dict[str, Any], where: str) -> None:
    ids = value.get("prompt_ids", [])
    if ids and len(ids) != value.get("prompt_tokens"):
        raise FieldError(f"field '{_join(where, 'prompt_ids')}' must hold prompt_tokens ids, not {len(ids)}")
    if not all(0 <= i < 2**31 for i in ids):
        raise FieldError(f"field '{_join(where, 'prompt_ids')}' must hold token ids between 0 and 2^31 − 1")


def _token_ids(value: dict[str, Any], where: str) -> None:
    """A token's ids (its own, a rejected draft's, an alternative's) are vocabulary
    indices, or -1 where a server did not say (remote/): what --simulate and the
    inspector index by."""
    for key in ("id", "rejected_id"):
        token_id = value.get(key)
        if token_id is not None and not -1 <= token_id < 2**31:
            raise FieldError(f"field '{_join(where, key)}' must be a token id between 0 and 2^31 − 1 (or -1: "
                             f"unknown), not {_short(token_id)}")


def _recommended(gamma: Any, where: str) -> None:
    """A recommended γ is shown as text: a count in range, or "auto", nothing else."""
    if gamma is None or gamma == "auto" or (isinstance(gamma, int) and not isinstance(gamma, bool)
                                              and 0 <= gamma <= MAX_SPECULATIVE_TOKENS):
        return
    raise FieldError(f"field '{where}' must be a γ between 0 and {MAX_SPECULATIVE_TOKENS} or \"auto\", "
                     f"not {_describe(gamma)}")


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


_RULES = {StepStats: _step_stats, TurnFinished: _metrics, TurnStarted: _turn_started, Token: _token_ids,
          Alternative: _token_ids}


def _short(value: Any) -> str:
    """A value quoted in a message: cleaned first, so a crafted one is not echoed."""
    text = repr(clean(value) if isinstance(value, str) else value)
    return text if len(text) <= 40 else text[:37] + "…"


def _describe(value: Any) -> str:
    return f"{_NAMES.get(type(value), type(value).__name__)} ({_short(value)})"
