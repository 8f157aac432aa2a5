"""The one error type users see: a single line naming the file, the key and the fix.

Raised at the edges (profile loading, model loading, CLI arguments) and shown by the
CLI and the UI as-is, never with a traceback.
"""

from __future__ import annotations


class SpecchatError(Exception):
    """A user-facing error. ``str()`` is one line, e.g.

    ``profiles/x.toml: key 'sampling.temprature' is unknown (line 7) — did you mean 'temperature'?``
    """

    def __init__(
        self,
        message: str,
        file: str | None = None,
        key: str | None = None,
        hint: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = None if file is None else str(file)
        self.key = key
        self.hint = hint
        self.line = line

    def __str__(self) -> str:
        text = self.message
        if self.line is not None:
            text += f" (line {self.line})"
        if self.file:
            text = f"{self.file}: {text}"
        if self.hint:
            text += f" — {self.hint}"
        # One line, whatever a wrapped library put in the message.
        return " ".join(text.split())


class ProfileError(SpecchatError):
    """A profile that cannot be read or does not validate."""


class ModelLoadError(SpecchatError):
    """A model, tokenizer or draft that cannot be loaded or used together."""


class SamplingError(SpecchatError, ValueError):
    """Sampling parameters out of range (also a ValueError, for callers of the engine API)."""


class GenerationError(SpecchatError):
    """Generation cannot go on (e.g. a model returned NaN or infinite logits). The
    engine's caches are reset; the chat, and what was already generated, stay."""
