"""Profiles: TOML files describing the models, the speculation and the sampling."""

from .loader import (
    DEFAULT_PROFILE,
    find_profile,
    load_all_profiles,
    load_profile,
    profile_files,
    profile_names,
)
from .model import (
    EMBEDDED_SOURCE,
    ChatSpec,
    ModelSpec,
    Profile,
    SamplingSpec,
    SpeculationSpec,
)

__all__ = [
    "DEFAULT_PROFILE", "EMBEDDED_SOURCE", "ChatSpec", "ModelSpec", "Profile", "SamplingSpec",
    "SpeculationSpec", "find_profile", "load_all_profiles", "load_profile", "profile_files", "profile_names",
]
