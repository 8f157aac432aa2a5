"""``specchat doctor``: whether this machine can run a profile, one cleaned line a check (they
quote paths and versions, someone else's bytes). Nothing here downloads."""

from __future__ import annotations

import platform
from typing import Any, Callable, Iterator

from specchat.doctor.checks import (FAIL, OK, WARNING, Check, check_bitsandbytes, check_cpu, check_cuda, check_data_dir,
                                    check_llama_cpp, check_mps, check_python, check_torch, from_error)
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

COLOURS = {OK: "\x1b[32m", WARNING: "\x1b[33m", FAIL: "\x1b[31m"}
RESET = "\x1b[0m"


def run_checks(profile_ref: str, smoke: bool = False) -> Iterator[Check]:
    """Every check for ``profile_ref`` (a name or path), as each finishes."""
    from specchat.config import load_profile

    yield check_python()
    torch = check_torch()
    yield torch
    try:
        profile = load_profile(profile_ref)
        yield Check("profile", OK, f"{profile.name} ({profile.source_path})")
    except SpecchatError as error:
        profile = None
        yield from_error("profile", error)
    if torch.status != FAIL:
        yield check_cuda(profile)
        if platform.system() == "Darwin":  # Apple's GPU
            yield check_mps(profile)
        yield check_cpu()
        yield check_bitsandbytes(profile)
    yield from check_llama_cpp(profile)
    if profile is not None and torch.status != FAIL:
        from specchat.doctor.models import check_memory, check_models

        checks, footprints = check_models(profile)
        yield from checks
        yield from check_memory(footprints, complete=all(c.status != FAIL for c in checks))
    yield from check_data_dir()
    if smoke and profile is not None and torch.status != FAIL:
        from specchat.doctor.smoke import smoke as smoke_check

        yield smoke_check(profile)


def line(check: Check, colour: bool = False) -> str:
    """``fail     cuda: not available … — fix: set device = "auto" …`` (inert text)."""
    text = clean_line(f"{check.name}:", check.detail, f"— fix: {check.fix}" if check.fix else "")
    status = f"{check.status:<8}"
    return f"{COLOURS[check.status]}{status}{RESET}{text}" if colour else status + text


def report(checks: Iterator[Check], write: Callable[[str], Any], colour: bool = False) -> int:
    """Writes each check as it comes, then a summary; 1 if any failed, else 0."""
    counts = {OK: 0, WARNING: 0, FAIL: 0}
    for check in checks:
        counts[check.status] += 1
        write(line(check, colour))
    write(f"{counts[OK]} ok, {counts[WARNING]} warning(s), {counts[FAIL]} failure(s)")
    return 1 if counts[FAIL] else 0
