"""doctor reads a GGUF model as the loader does (issue 59, item 8): a header that lies
(a tensor count of 2⁶³−1, a 4-byte file, the first MB of a real model) fails doctor's
model line where ``run`` refuses it, and a FIFO named as the model is "not a regular
file", not "does not exist". Planted bugs: the header read only for a conversion's size
(doctor said "ok"), and no FIFO case in ``gguf_path``."""

from __future__ import annotations

import os
import struct

import pytest

from specchat.config import load_profile
from specchat.doctor.models import check_models
from specchat.loading import embedded
from specchat.models.gguf_meta import read_info


def doctor_models(tmp_path, source) -> list[str]:
    """doctor's model lines for a llama.cpp profile of ``source``, used as it is (no
    gguf_type: no conversion, whose size would read the header anyway)."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'[target]\nbackend = "llama.cpp"\nsource = "{source}"\n')
    checks, _ = check_models(load_profile(str(profile)))
    return [f"{c.status} {c.name}: {c.detail}" for c in checks]


@pytest.mark.parametrize("damage", ["lying-count", "four-bytes", "first-mb"])
def test_a_gguf_whose_header_lies_fails_its_model_line(tmp_path, damage):
    path = tmp_path / "model.gguf"
    if damage == "lying-count":
        path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**63 - 1, 0))
    elif damage == "four-bytes":
        path.write_bytes(b"GGUF")
    else:
        real = embedded.find_gguf()
        if real is None:
            pytest.skip("the embedded model is not installed")
        with open(real, "rb") as f:
            path.write_bytes(f.read(1 << 20))
    (line,) = [line for line in doctor_models(tmp_path, path) if "target" in line]
    assert not line.startswith("ok") and "the GGUF header cannot be read" in line and str(path) in line, line


def test_a_fifo_model_path_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    (line,) = [line for line in doctor_models(tmp_path, fifo) if "target" in line]
    assert "not a regular file" in line and "does not exist" not in line, line


def test_the_one_gguf_reader_counts_what_gguf_py_counts():
    """models/gguf_meta.py reads the tensor table doctor sizes a model from (gguf-py's
    GGUFReader did, a second reader of the same header)."""
    gguf = pytest.importorskip("gguf")
    real = embedded.find_gguf()
    if real is None:
        pytest.skip("the embedded model is not installed")
    assert read_info(real).parameters == sum(int(t.n_elements) for t in gguf.GGUFReader(real).tensors) > 0
