"""``export --force -o PATH`` replaces only a regular file (issue 59, item 3).

A character device (a pseudo-terminal here) or a FIFO is written into (as root,
``-o /dev/full --force`` turned the device into a 0600 file); a link or a folder is refused in one line, and whatever
the link points at is left as it was. Planted bug: ``os.replace`` of the temp file over
any target, as before — the FIFO becomes a file, the link a file, the folder a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
import threading

import pytest

from specchat.errors import SpecchatError
from specchat.sessions import private_files
from specchat.sessions.private_files import write_export


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)  # left blocked if it fails
    reader.start()
    write_export(fifo, "# chat\n", force=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    reader.join(30)
    assert got == [b"# chat\n"]


@pytest.fixture
def terminal():
    """A pseudo-terminal's device path (a character device no test can turn into a file:
    /dev/null would become one, as root, under the planted bug) and its master's fd."""
    master, slave = os.openpty()
    yield os.ttyname(slave), master
    os.close(slave)
    os.close(master)


def test_a_character_device_is_written_into_not_replaced(terminal):
    path, master = terminal
    before = os.stat(path)
    write_export(path, "# chat\n", force=True)
    after = os.stat(path)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert os.read(master, 100).replace(b"\r", b"") == b"# chat\n"


def test_a_device_that_refuses_the_bytes_is_one_line(terminal, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as /dev/full answers

    monkeypatch.setattr(private_files, "write_all", full)
    with pytest.raises(SpecchatError, match="cannot write the export .No space left") as caught:
        write_export(terminal[0], "# chat\n", force=True)
    assert terminal[0] in str(caught.value)


def test_a_link_and_a_folder_are_refused_and_left_whole(tmp_path):
    (tmp_path / "notes.md").write_text("mine")
    link = tmp_path / "out" / "chat.md"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "notes.md")
    with pytest.raises(SpecchatError, match="is a link"):
        write_export(link, "# chat\n", force=True)
    assert link.is_symlink() and (tmp_path / "notes.md").read_text() == "mine"
    with pytest.raises(SpecchatError, match="is a folder"):
        write_export(tmp_path / "out", "# chat\n", force=True)
    assert link.is_symlink()


def test_a_regular_file_is_still_replaced(tmp_path):
    out = tmp_path / "chat.md"
    out.write_text("old")
    write_export(out, "new", force=True)
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o600
