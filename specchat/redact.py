"""Secrets out of text: an API key or a URL's credentials never reach a screen, a log, a
recording or an export. A server can echo either back (an error body is the usual place), so
its text passes through :func:`redact` with its endpoint's secrets, and URLs through
:func:`redact_url`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"

# The user info of any URL in a text: everything between "scheme://" and "@" in the
# authority (a user name can be a token too, so all of it goes).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]+@")


def redact_url(text: str) -> str:
    """``text`` with the user info of every URL in it replaced by ``***``."""
    return _USERINFO.sub(rf"\g<1>{MASK}@", text)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each of ``secrets`` (longest first, so one inside another cannot
    leave a tail) and every URL's user info replaced by ``***``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact_url(text)
