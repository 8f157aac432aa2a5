"""Model loading: profile → (target, tokenizer, draft) on the right device and dtype."""

from .models import LoadedModels, load_models

__all__ = ["LoadedModels", "load_models"]
