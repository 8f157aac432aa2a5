"""The one error type users see: a single line naming the file, the key and the fix.

Raised at the edges (profile loading, model loading, CLI arguments) and shown by the
CLI and the UI as-is, never with a traceback.
"""

from __future__ import annotations

from .redact import redact_url
from .sanitize import clean_line


class SpecchatError(Exception):
    """A user-facing error. ``str()`` is one line, e.g.

    ``profiles/x.toml: key 'sampling.temprature' is unknown (line 7) — did you mean 'temperature'?``
    """

    def __init__(self, message: str, file: str | None = None, key: str | None = None, hint: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = None if file is None else str(file)
        self.key = key
        self.hint = hint
        self.line = line

    def __str__(self) -> str:
        # One line of inert text, whatever a wrapped library (or a recording's file
        # name, key or value quoted in the message) put in it; each part is cleaned on
        # its own, so a broken sequence in the file name cannot hide the message. A URL
        # quoted anywhere in it is shown without its user info (a password, a token).
        parts = [f"{clean_line(self.file)}:" if self.file else "", clean_line(self.message)]
        if self.line is not None:
            parts.append(f"(line {self.line})")
        if self.hint:
            parts.append(f"— {clean_line(self.hint)}")
        return redact_url(clean_line(*parts))


class ProfileError(SpecchatError):
    """A profile that cannot be read or does not validate."""


class ModelLoadError(SpecchatError):
    """A model, tokenizer or draft that cannot be loaded or used together."""


class SamplingError(SpecchatError, ValueError):
    """Sampling parameters out of range (also a ValueError, for callers of the engine API)."""


class GenerationError(SpecchatError):
    """Generation cannot go on (e.g. a model returned NaN or infinite logits). The
    engine's caches are reset; the chat, and what was already generated, stay."""


def one_line(exc: BaseException) -> str:
    """A user-facing, inert line for any exception: SpecchatError's own text, else type + message."""
    return clean_line(str(exc) if isinstance(exc, SpecchatError) else f"{type(exc).__name__}: {exc}")
