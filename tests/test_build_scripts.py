"""scripts/build-llama-server.sh reuses its cached binaries only when they were built for
this CPU and these cmake flags (GGML_NATIVE): a home shared with a machine of another CPU
kind must not hand this one a binary built for instructions it lacks."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build-llama-server.sh"


def cpu_key(cmake_args: str = "") -> str:
    """The script's rule, written out: sha256 of the cmake flags, the CPU's flag line and,
    on an AMX CPU only, the flags that leave AMX out."""
    flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith(("flags", "Features"))), "")
    amx = f"{NO_AMX}\n" if platform.machine() == "x86_64" and "amx_tile" in flags.split() else ""
    return hashlib.sha256(f"{cmake_args}\n{platform.machine()} {flags}\n{amx}".encode()).hexdigest()[:16]


NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="AMX is x86's; elsewhere the script prints nothing")
def test_llama_cpp_builds_leave_amx_out_on_an_amx_cpu_only(tmp_path):
    """scripts/no-amx-flags.sh: the three -mno-amx flags for a CPU whose flags list amx_tile,
    nothing for one without; and with them, -march of an AMX CPU defines no __AMX_*__ macro
    (the guard of ggml's AMX kernels), whichever comes first."""
    script = SCRIPT.parent / "no-amx-flags.sh"

    def flags_for(cpu_flags: str) -> str:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {cpu_flags}\n")
        env = {**os.environ, "SPECCHAT_CPUINFO": str(cpuinfo)}
        return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True).stdout.strip()

    assert flags_for("fpu sse2 avx2 avx512f avx512_bf16") == ""
    assert flags_for("fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8") == NO_AMX
    try:
        macros = subprocess.run(["gcc", *NO_AMX.split(), "-march=sapphirerapids", "-dM", "-E", "-"], input="",
                                capture_output=True, text=True, check=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError):
        return  # no gcc that knows sapphirerapids: the flag rule above is still checked
    assert "__AVX512F__" in macros and "__AMX_" not in macros


def run_script(cache: Path, cmake_args: str = "") -> subprocess.CompletedProcess:
    # PYTHON=false: a rebuild fails at once, at its first step (downloading the sdist)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHON": "false", "LLAMA_SERVER_CMAKE_ARGS": cmake_args}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_cached_binaries_are_reused_only_for_the_cpu_and_flags_they_were_built_for(tmp_path):
    if not Path("/proc/cpuinfo").is_file():
        pytest.skip("no /proc/cpuinfo on this system: the script reads the flags from sysctl there")
    bin_dir = tmp_path / "specchat" / "llama-server" / "0.3.36" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("llama-server", "rpc-server"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    # built before the binaries carried their CPU, or on another CPU: rebuilt, not reused
    for stamp in (None, "0123456789abcdef"):
        if stamp is not None:
            (bin_dir / "built-for").write_text(stamp + "\n")
        assert run_script(tmp_path).returncode != 0
    (bin_dir / "built-for").write_text(cpu_key() + "\n")
    reused = run_script(tmp_path)
    assert reused.returncode == 0 and reused.stdout.strip() == str(bin_dir)
    assert run_script(tmp_path, "-DGGML_AVX512=OFF").returncode != 0  # other flags, another build
