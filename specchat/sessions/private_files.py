"""Files that hold chats: created private (0700 dir, 0600 files, whatever the umask) and
exclusively (``O_EXCL``: two processes never share one), and never clobbered by accident: an
export replaces a file only with ``--force``, never the recording it exports, and only a regular
file (a device or a FIFO is written into, a link or a folder refused in one line).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from specchat.errors import SpecchatError

DIR_MODE = 0o700
FILE_MODE = 0o600
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory only its owner can enter: created 0700 (parents with the
    umask's defaults), or tightened to 0700 when it exists and lets others in (sessions
    dirs of older versions were 0755)."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    mode = path.stat().st_mode
    if stat.S_IMODE(mode) & 0o077 and hasattr(os, "getuid") and path.stat().st_uid == os.getuid():
        path.chmod(stat.S_IMODE(mode) & ~0o077)
    return path


def create_private(path: str | os.PathLike[str], *, append: bool = True) -> int:
    """A new file, 0600, opened for writing; raises FileExistsError if ``path`` exists."""
    return os.open(path, _CREATE | (os.O_APPEND if append else 0), FILE_MODE)


def write_all(fd: int, data: bytes) -> None:
    """Writes every byte (``os.write`` may write fewer than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_export(out: str | os.PathLike[str], text: str, *, source: str | os.PathLike[str] | None = None,
                 force: bool = False) -> Path:
    """Writes an export, 0600. Refuses to write over ``source`` (the recording it came
    from) and, unless ``force``, over any existing file; raises SpecchatError (one line)."""
    out = Path(out)
    if source is not None and out.exists() and os.path.samefile(out, source):
        raise SpecchatError("will not write the export over the recording it comes from", file=str(out),
                            hint="choose another name with -o")
    data = text.encode("utf-8")
    try:
        info = os.lstat(out)
    except FileNotFoundError:
        info = None
    if force and info is not None and (stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        # a device or a pipe takes the export as a stream; replacing it would put a file in its place
        try:
            fd = os.open(out, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            raise SpecchatError(f"cannot write the export ({exc.strerror or exc})", file=str(out),
                                hint="name a file or a device that takes it with -o") from None
        return out
    if force and info is not None and not stat.S_ISREG(info.st_mode):
        kind = "a link" if stat.S_ISLNK(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode) else "not a file"
        raise SpecchatError(f"is {kind}: --force replaces only a regular file", file=str(out),
                            hint="name the file itself, or another name, with -o")
    # --force replaces atomically, from a file beside it: a failure leaves the old file as it was
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}") if force else out
    if force:
        tmp.unlink(missing_ok=True)  # left by a killed export with this pid
    try:
        fd = create_private(tmp, append=False)
    except FileExistsError:
        raise SpecchatError("already exists", file=str(out),
                            hint="pass --force to replace it, or choose another name with -o") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if force:
            os.replace(tmp, out)
    finally:
        if force and tmp.exists():
            tmp.unlink()
    return out
