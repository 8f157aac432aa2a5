"""What the model caches share: an entry is checked against its record before it is trusted
(llama.cpp would abort on a file cut short), a bad one is rebuilt once, and a cache that
cannot be written is one line naming the path."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

from .. import untrusted
from ..errors import ModelLoadError

def unwritable(folder: Path, error: OSError, what: str, key: str | None = None) -> ModelLoadError:
    """One line for a cache write that failed: a full disk, or a place that cannot be
    written (read-only, or under a file), each with its own fix."""
    reason = error.strerror or type(error).__name__
    where = error.filename or folder
    if error.errno == errno.ENOSPC:
        hint = "free some disk space, or set SPECCHAT_CACHE_DIR to a directory on another disk"
    elif error.errno in (errno.ENOTDIR, errno.EEXIST):
        hint = "part of that path is a file, not a directory: set SPECCHAT_CACHE_DIR to a writable directory"
    else:
        hint = "make it writable, or set SPECCHAT_CACHE_DIR to a writable directory"
    return ModelLoadError(f"cannot write {what} to the cache ({reason}: {where})", key=key, hint=hint)


def make_folder(folder: Path, what: str, key: str | None = None) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise unwritable(folder, error, what, key) from None


def remove_entry(path: Path, key: str | None = None) -> None:
    """Clears whatever is at ``path`` (a file, a link, a directory) for a rebuild; if it
    cannot be removed, the one line says to delete it."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    except OSError as error:
        raise ModelLoadError(f"the cached entry {path} is damaged and cannot be removed "
                             f"({error.strerror or type(error).__name__})", file=str(path), key=key,
                             hint=f"delete {path} and start again: it is rebuilt") from None


def record_path(entry: Path) -> Path:
    return entry.with_name(entry.name + ".record.json")


def write_record(entry: Path, fingerprint: str) -> None:
    """After a complete write: the entry's size and :func:`fingerprint` of its content."""
    record_path(entry).write_text(json.dumps({"size": entry.stat().st_size, "fingerprint": fingerprint}) + "\n")


def entry_problem(entry: Path, fingerprint) -> str | None:
    """Why the file at ``entry`` is not the one its record describes (None when it is):
    missing, not a file, no record, another size (cut short), other bytes (damaged or
    foreign). ``fingerprint(path)`` hashes the content the way the record did."""
    if not entry.exists() and not entry.is_symlink():
        return "missing"
    if not entry.is_file():
        return "not a file"
    try:
        record = untrusted.json_object(untrusted.read_text(record_path(entry)))
        size, expected = int(record["size"]), str(record["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):  # ValueError: untrusted.Unreadable, int()'s
        return "no record of a complete conversion"
    try:
        actual_size = entry.stat().st_size
        if actual_size != size:
            return f"{actual_size:,} bytes where {size:,} were written"
        if fingerprint(entry) != expected:
            return "its content is not what was written"
    except OSError as error:
        return f"unreadable ({error.strerror or type(error).__name__})"
    return None
