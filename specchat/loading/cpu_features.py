"""Does this CPU compute bfloat16 natively? It decides ``dtype = "auto"`` on a CPU: native
bf16 (AVX-512 BF16, AMX, Arm FEAT_BF16) runs torch's products at about twice float32's
speed, emulated bf16 slower than float32. Read from the CPU's own flags, never its vendor."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

# flag → what to call it; the first present one is named in the reason
X86_BF16_FLAGS = {"amx_bf16": "AMX", "avx512_bf16": "AVX-512 BF16"}
ARM_BF16_FLAGS = {"bf16": "Arm BF16"}
APPLE_SYSCTL = "hw.optional.arm.FEAT_BF16"


def cpu_native_bf16(machine: str, flags: str | None, source: str, capability: str | None = None) -> tuple[bool, str]:
    """(native, reason) from ``platform.machine()`` and the CPU's feature words (space
    separated; None when unreadable); ``source`` and torch's ``capability`` are quoted only."""
    hint = f"; torch CPU capability {capability}" if capability else ""
    arch = machine.lower()
    if arch in ("x86_64", "amd64", "i386", "i686", "x86"):
        known = X86_BF16_FLAGS
    elif arch in ("aarch64", "arm64", "armv8l", "armv9l"):
        known = ARM_BF16_FLAGS
    else:
        return False, f"no known bf16 feature flag for a {machine or 'unknown'} CPU ({hint[2:] or 'no torch hint'})"
    if flags is None:
        return False, f"could not read the CPU's feature flags ({source}{hint})"
    words = set(flags.split())
    for flag, name in known.items():
        if flag in words:
            return True, f"the CPU computes bf16 natively ({name}: {flag} in {source}{hint})"
    wanted = " or ".join(known)
    return False, f"no native bf16 on this CPU (no {wanted} in {source}{hint}); emulated bf16 is slower than float32"


@functools.lru_cache(maxsize=1)
def detect_cpu_bf16() -> tuple[bool, str]:
    """cpu_native_bf16 for the machine this runs on (read once per process)."""
    import torch

    machine = platform.machine()
    flags, source = _read_flags()
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # older torch: no hint, no harm
        capability = None
    return cpu_native_bf16(machine, flags, source, capability)


def _read_flags() -> tuple[str | None, str]:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        try:
            return flags_from_cpuinfo(cpuinfo.read_text(errors="replace")), "/proc/cpuinfo"
        except OSError:
            return None, "/proc/cpuinfo"
    if platform.system() == "Darwin":
        source = f"sysctl {APPLE_SYSCTL}"
        try:
            out = subprocess.run(["sysctl", "-n", APPLE_SYSCTL], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None, source
        if out.returncode != 0:  # the key is absent on CPUs (and macOS versions) without it
            return "", source
        return ("bf16" if out.stdout.strip() == "1" else ""), source
    return None, f"no CPU feature list on {platform.system() or 'this system'}"


def flags_from_cpuinfo(text: str) -> str | None:
    """The first "flags" (x86) or "Features" (Arm) line of /proc/cpuinfo, or None."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return value.strip()
    return None
