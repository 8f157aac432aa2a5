"""Which suffix store a chat drafts from and keeps its replies in (``speculation.suffix_store``):
"off", "auto" (``<data dir>/suffix-store/<fingerprint>.bin``, built from the recorded
replies when missing, rebuilt when damaged) or a path (damaged: SuffixStoreError).
Design notes: docs/design/proposers.md
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from specchat.engine.proposers.suffix_store import (
    NewerStoreError,
    SuffixStore,
    SuffixStoreError,
    load_store,
    locked,
    tokenizer_fingerprint,
)
from specchat.paths import data_dir
from specchat.sanitize import clean_line


@dataclass
class OpenedStore:
    """A chat's store, where it is kept, a one-line ``notice`` for the first turn, and
    ``keep``: False for a chat that is not recorded (the file never gets its replies)."""

    store: SuffixStore
    path: Path
    notice: str | None = None
    keep: bool = True
    seen: tuple | None = None  # the file as this chat last read or wrote it (_identity)
    unsaved: list[list[int]] = field(default_factory=list)  # replies the file does not hold yet

    def remember(self, reply: list[int]) -> str | None:
        """Adds a finished reply's ids and saves, merged with other chats' saves (under the
        store's lock) → a line saying why it could not be saved, or None."""
        if not self.keep:
            return None
        self.store.add(reply)
        self.unsaved.append(reply)
        try:
            with locked(self.path):
                self._merge()
                self.store.save(self.path)
                self.seen = _identity(self.path)
        except NewerStoreError as exc:
            return clean_line(f"the suffix store was not saved: {exc}")
        except OSError as exc:
            return clean_line(f"the suffix store was not saved ({exc.strerror or exc}): {self.path}")
        self.unsaved.clear()
        return None

    def _merge(self) -> None:
        """Where another chat rewrote the file since: its replies, then this chat's unsaved
        ones (a file that no longer loads is replaced; a newer specchat's raises)."""
        now = _identity(self.path)
        if now is None or now == self.seen:
            return
        try:
            disk = load_store(self.path, self.store.fingerprint, self.store.vocab_size, self.store.max_tokens)
        except NewerStoreError:
            raise
        except SuffixStoreError:
            return
        for reply in self.unsaved:
            disk.add(reply)
        self.store.adopt(disk)


def _identity(path: Path) -> tuple | None:
    """What tells one write of the file from another (a save replaces it: a new inode)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def auto_path(fingerprint: str) -> Path:
    return data_dir() / "suffix-store" / f"{fingerprint[:32]}.bin"


Recorded = Callable[[str], Iterable[list[int]]]  # a model's source → its recorded replies' ids, oldest first


def open_store(setting: str, tokenizer: Any, model_source: str, base: Path | None = None,
               recorded: Recorded | None = None, keep: bool = True) -> OpenedStore | None:
    """The store ``setting`` names for a chat on ``tokenizer`` (None for "off"); ``keep``: False
    leaves its file as it is. SuffixStoreError (one line) for a damaged or foreign explicit path."""
    if setting == "off":
        return None
    fingerprint, vocab_size = tokenizer_fingerprint(tokenizer)
    if setting != "auto":
        path = Path(setting).expanduser()
        path = path if path.is_absolute() or base is None else base / path
        if not path.exists():
            return OpenedStore(SuffixStore(fingerprint, vocab_size), path, keep=keep)
        return _loaded(path, fingerprint, vocab_size, keep)
    path = auto_path(fingerprint)
    notice, newer = None, False
    if path.exists():
        try:
            return _loaded(path, fingerprint, vocab_size, keep)
        except NewerStoreError as exc:  # not this version's to replace: the chat drafts without it
            notice, newer = f"{exc.message}: {path}", True
        except SuffixStoreError as exc:
            notice = f"{exc.message}: {path}"
    store = SuffixStore(fingerprint, vocab_size, recorded(model_source) if recorded else ())
    opened = OpenedStore(store, path, keep=keep and not newer)
    if notice is not None:
        where = (" for this chat only (the newer store is left as it is)" if newer else
                 "" if keep else " for this chat only (not saved: it is not recorded)")
        opened.notice = clean_line(f"{notice} — rebuilt{where} from {len(store.replies)} recorded replies")
    if store.replies or notice is not None:  # a damaged file is replaced now, not left for the next chat
        opened.notice = opened.remember([]) or opened.notice
    return opened


def _loaded(path: Path, fingerprint: str, vocab_size: int, keep: bool) -> OpenedStore:
    seen = _identity(path)  # before the read: a save in between is merged at the first reply
    return OpenedStore(load_store(path, fingerprint, vocab_size), path, keep=keep, seen=seen)
