"""Profiles: TOML files describing the models, the speculation and the sampling."""

from .loader import DEFAULT_PROFILE, load_all_profiles, load_profile, profile_files
from .model import Profile

__all__ = ["DEFAULT_PROFILE", "Profile", "load_all_profiles", "load_profile", "profile_files"]
