"""The profile a recording carries, rebuilt as data to carry the chat on (``--resume``). It is
untrusted: validated like a profile file, no file it names read (``source_path``, ``extends``;
a ``suffix_store`` path becomes "auto"), and its ``trust_remote_code = true`` or a server it
names refused without ``--trust-remote-code`` / ``--trust-recorded-server``: whoever shared the
file would otherwise run code here, or choose where specchat connects and which key it sends.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..errors import ProfileError
from ..methods import REMOTE_BACKENDS
from .model import Profile
from .schema import build_profile, check_keys

_HINT = "or pass --profile NAME to carry the chat on with a profile of yours"


def profile_from_recording(data: Any, file: str, *, trust_remote_code: bool = False,
                           trust_server: bool = False) -> Profile:
    """The recorded, resolved profile (``SessionHeader.profile``) as a :class:`Profile`; ProfileError (one
    line naming the recording) when it does not validate, or asks for what its trust flag does not allow."""
    if not isinstance(data, dict) or not data:
        raise ProfileError("the recording carries no profile", file=file, hint=_HINT.removeprefix("or "))
    raw = _without_nulls(data)
    name, source_path = raw.pop("name", None), raw.pop("source_path", None)
    if "extends" in raw:
        raise ProfileError("the recorded profile has 'extends', which is never followed from a recording",
                           file=file, key="extends", hint=_HINT.removeprefix("or "))
    try:
        check_keys(raw, Path(file), lambda _key: None)
        profile = build_profile(name if isinstance(name, str) and name else "recorded", raw, Path(file),
                                lambda _key: None)
    except ProfileError as error:
        raise ProfileError(f"the recorded profile: {error.message}", file=file, key=error.key,
                           hint=f"{error.hint}, {_HINT}" if error.hint else _HINT) from None
    if profile.trust_remote_code and not trust_remote_code:
        raise ProfileError("the recorded profile sets trust_remote_code = true, which would run Python code from "
                           "the model's repository", file=file, key="trust_remote_code",
                           hint=f"pass --trust-remote-code only if you trust '{profile.target.source}', {_HINT}")
    if profile.target.backend in REMOTE_BACKENDS and not trust_server:
        url, variable = profile.target.url, profile.target.api_key_env
        sends = f" and send the value of ${variable} as its key" if variable else ""
        raise ProfileError(f"the recorded profile would connect to the server at {url}{sends}", file=file,
                           key="target.url", hint=f"pass --trust-recorded-server only if you trust that server"
                                                  f"{' with that variable' if variable else ''}, {_HINT}")
    if profile.speculation.suffix_store not in ("off", "auto"):  # a path: never read or written for a recording
        profile = dataclasses.replace(profile, speculation=dataclasses.replace(profile.speculation, suffix_store="auto"))
    # The recorded file's folder still anchors relative model paths, as it did live;
    # the file itself is never read.
    return dataclasses.replace(profile, source_path=Path(source_path) if isinstance(source_path, str) else None)


def _without_nulls(value: Any) -> Any:
    """A profile's ``to_dict()`` writes unset keys as null; TOML has no null."""
    return {k: _without_nulls(v) for k, v in value.items() if v is not None} if isinstance(value, dict) else value
