"""The quantized matmul kernels of the llama.cpp set-up installed (patches/llama.cpp/0005,
Q4_K and Q6_K weights times a few rows, in 512-bit registers where AVX-512 is since 0007; 0006,
Q8_0, Q4_0 and Q5_0), against an exact reference within the format's
rounding bound, and each row bit for bit against the one-token step's product:
scripts/ggml-kernel-check.sh builds scripts/ggml-kernel-check.cpp against the venv's libggml
and runs it (the bound is derived there; a planted row shift or skipped block fails it, and
the first Q4_K kernel, which summed in another order, fails the bit-for-bit check, as does
0006's streamed sgemm tile planted to sum its blocks last to first, and 0007's 512-bit Q6_K
tile planted to scale by the two scales one after the other; issue 57). Needs a C++ compiler and the cached llama-cpp-python sdist (its
headers); run it under scripts/as-avx2.sh as well, for the AVX2 kernels."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp

VERSION = "0.3.36"


def cached_sdist() -> Path | None:
    roots = {Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specchat", Path.home() / ".cache" / "specchat"}
    for root in roots:
        for f in (root / "llama-server" / VERSION / "src" / f"llama_cpp_python-{VERSION}.tar.gz",
                  root / "llama-cpp-python" / VERSION / f"llama_cpp_python-{VERSION}.tar.gz"):
            if f.is_file():
                return f
    return None


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler")
@pytest.mark.skipif(cached_sdist() is None, reason="no cached llama-cpp-python sdist (make setup fetches it)")
def test_quantized_matmul_kernels_within_the_formats_rounding():
    done = subprocess.run([str(ROOT / "scripts" / "ggml-kernel-check.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("q4_K", "q6_K"):
        assert f"{name}: 192 of 192 cases within the bound" in done.stdout, done.stdout
    for name in ("q8_0", "q4_0", "q5_0"):
        assert f"{name}: 320 of 320 cases within the bound" in done.stdout, done.stdout
