"""Model backends behind the engine's one seam (base.py)."""

from __future__ import annotations

import torch

from specchat.engine.backends.base import Backend, common_prefix_length

__all__ = ["Backend", "as_backend", "common_prefix_length"]


def as_backend(model: Backend | torch.nn.Module) -> Backend:
    """A backend as it is; a transformers model (a ``torch.nn.Module``) wrapped in
    :class:`~specchat.engine.backends.transformers.TransformersBackend` (the engine's
    public API takes either). Anything else is a TypeError, not a guess.

    Here rather than in base.py: the wrapper imports base.py, so base.py importing the
    wrapper made a circle (lint-imports' acyclic contract forbids it)."""
    if isinstance(model, Backend):
        return model
    if isinstance(model, torch.nn.Module):
        from specchat.engine.backends.transformers import TransformersBackend

        return TransformersBackend(model)
    raise TypeError(f"not a model: {type(model).__name__} (give a Backend or a transformers model)")
