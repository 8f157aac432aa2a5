"""``train-head``'s work folder, ``<out>/work``: made, cleared and read back safely. A fresh
run clears only a ``work`` folder specchat made (it holds MARKER); anything else it will not
touch (a file, a link, a foreign folder, a damaged ``distilled.jsonl``) is one line, before
the model loads.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from specchat.errors import SpecchatError

MARKER = ".specchat-train-head"  # in every work folder specchat made: only such a folder is cleared


def prepare_work(out: Path, resume: bool) -> Path:
    """``out / "work"``, ready for the stages: cleared unless ``resume`` (only when specchat
    made it), created with its marker. Raises SpecchatError (one line) for what it will not touch."""
    if out.exists() and not out.is_dir():
        raise SpecchatError("--out names a file, not a folder", file=str(out),
                            hint="name a folder (it is created when missing) for the head")
    work = out / "work"
    if work.is_symlink() or (work.exists() and not work.is_dir()):
        raise SpecchatError("the work folder is a link or a file, not a folder specchat made", file=str(work),
                            hint="remove or rename it, or choose another --out")
    if resume:
        read_distilled(work / "distilled.jsonl")  # a damaged file is said now, before the model loads
    elif work.is_dir() and any(work.iterdir()):
        if not (work / MARKER).is_file():
            raise SpecchatError("this folder was not made by train-head: it is left as it is", file=str(work),
                                hint="choose another --out, or move this folder away")
        shutil.rmtree(work)
    try:
        work.mkdir(parents=True, exist_ok=True)
        (work / MARKER).touch()
    except OSError as exc:  # a file on the way (--out FILE/sub), no permission, a full disk
        raise SpecchatError(f"cannot make the work folder ({exc.strerror or exc})", file=str(work),
                            hint="name a folder you can write to with --out") from None
    return work


def read_distilled(path: Path) -> list[dict]:
    """The rows of ``distilled.jsonl`` ([] when missing). A line cut by a kill mid-write
    (the last, without its newline) is dropped from the file and redone; any other line
    that is not a row, or a path that is no regular file, raises SpecchatError naming it."""
    try:
        info = os.stat(path)  # before opening: opening a FIFO would block
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SpecchatError(f"cannot read it ({exc.strerror or exc})", file=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecchatError("not a regular file (a folder, a FIFO or a device?)", file=str(path),
                            hint="move it away and run without --resume to distil again")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SpecchatError(f"cannot read it ({exc.strerror or exc})", file=str(path)) from None
    lines = text.split("\n")
    if lines[-1]:  # no newline after the last line: cut while written
        path.write_text("\n".join(lines[:-1]) + ("\n" if len(lines) > 1 else ""), encoding="utf-8")
    rows = []
    for number, line in enumerate(lines[:-1], 1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not _is_row(row):
            raise SpecchatError("not a row the distill stage wrote", file=str(path), line=number,
                                hint="run without --resume to distil again")
        rows.append(row)
    return rows


def _is_row(row: object) -> bool:
    return (isinstance(row, dict) and all(type(row.get(key)) is int for key in ("index", "prompt", "replies",
                                                                               "reply_start"))
            and isinstance(row.get("ids"), list) and all(type(i) is int for i in row["ids"]))
