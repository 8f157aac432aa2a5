"""Model backends behind the engine's one seam (base.py)."""

from specchat.engine.backends.base import Backend, as_backend, common_prefix_length

__all__ = ["Backend", "as_backend", "common_prefix_length"]
