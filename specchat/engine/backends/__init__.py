"""Model backends behind the engine's one seam (base.py)."""

from __future__ import annotations

import torch

from specchat.engine.backends.base import Backend, common_prefix_length

__all__ = ["Backend", "as_backend", "common_prefix_length"]


def as_backend(model: Backend | torch.nn.Module) -> Backend:
    """A backend as it is; a transformers model wrapped in TransformersBackend; anything
    else a TypeError. Not in base.py: the wrapper imports base.py (an import cycle)."""
    if isinstance(model, Backend):
        return model
    if isinstance(model, torch.nn.Module):
        from specchat.engine.backends.transformers import TransformersBackend

        return TransformersBackend(model)
    raise TypeError(f"not a model: {type(model).__name__} (give a Backend or a transformers model)")
