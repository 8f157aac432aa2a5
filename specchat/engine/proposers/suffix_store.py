"""The global suffix store: token ids of this user's earlier replies, for suffix decoding.
On disk one JSON header line, then little-endian uint32 ids, each reply ended by SEPARATOR,
read as untrusted, for the tokenizer whose fingerprint it carries (docs/design/proposers.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from array import array
from collections import deque
from itertools import islice, takewhile
from pathlib import Path
from typing import Any, Iterable, Iterator

from specchat import untrusted
from specchat.errors import SpecchatError

MAGIC = "specchat-suffix-store"
VERSION = 1
MAX_TOKENS = 1 << 18  # ids kept (1 MiB on disk; ~500 replies of 500 tokens; tens of MB of index)
SEPARATOR = 0xFFFFFFFF  # after each reply on disk; never an id
END = -1  # the separator in memory: equal to no id, so no match runs across it
MAX_HEADER = 4096  # bytes of the JSON line
MAX_FILE = 64 << 20  # a larger file is refused before it is read
DIR_MODE, FILE_MODE = 0o700, 0o600  # the store is someone's replies: private, as recordings are
SCAN = 1024  # most recent occurrences of a pair looked through for a longer n-gram


class SuffixStoreError(SpecchatError):
    """A store that cannot be used: unreadable, damaged, or another tokenizer's."""


class NewerStoreError(SuffixStoreError):
    """A store a newer specchat wrote: not damaged, and not this version's to replace."""


def tokenizer_fingerprint(tokenizer: Any) -> tuple[str, int]:
    """(sha256 over every (id, token string) of the vocabulary in id order, largest id + 1):
    shared only by tokenizers that spell every id alike (transformers' and a GGUF's do not)."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256()
    for token, i in sorted(vocab.items(), key=lambda item: item[1]):
        digest.update(f"{int(i)}\t{token}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest(), max(vocab.values(), default=-1) + 1


class SuffixStore:
    """Earlier replies (oldest first) and their index. ``tokens`` is them flat, each
    reply preceded and followed by END, so a position's neighbours never need a bound check."""

    def __init__(self, fingerprint: str, vocab_size: int, replies: Iterable[list[int]] = (),
                 max_tokens: int = MAX_TOKENS) -> None:
        self.fingerprint = fingerprint
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.replies: deque[list[int]] = deque()
        self.count = 0  # ids held
        for reply in replies:  # trimmed as they come: a long history is never held whole
            self._hold(reply)
            self._trim(self.max_tokens)
        self._reindex()

    # --- what suffix decoding reads
    def positions(self, gram: list[int]) -> list[int]:
        """Where ``gram`` (≥ 1 ids) ended in ``tokens``, ascending; for n ≥ 3 only among
        the SCAN most recent occurrences of its last two ids."""
        if len(gram) == 1:
            return self._by_id.get(gram[0], [])
        found = self._by_pair.get((gram[-2] << 32) | gram[-1], [])
        if len(gram) == 2:
            return found
        n, tokens = len(gram), self.tokens
        return [j for j in found[-SCAN:] if j >= n and tokens[j - n + 1:j + 1] == gram]

    # --- growing
    def add(self, reply: list[int]) -> None:
        """Keeps a finished reply (its ids up to the first one outside the vocabulary; at
        most ``max_tokens``), dropping the oldest replies past the bound."""
        if self._hold(reply) is None:
            return
        if self.count > self.max_tokens:
            self._trim(self.max_tokens * 3 // 4)
            self._reindex()
        else:
            self._index_reply(self.replies[-1])

    def _hold(self, reply: list[int]) -> list[int] | None:
        # its ids up to the first outside the vocabulary, at most max_tokens
        kept = [int(i) for i in islice(takewhile(lambda i: 0 <= i < self.vocab_size, reply), self.max_tokens)]
        if not kept:
            return None
        self.replies.append(kept)
        self.count += len(kept)
        return kept

    def adopt(self, other: SuffixStore) -> None:
        """Holds ``other``'s replies instead of its own (another process's saves merged in)."""
        self.replies, self.count = other.replies, other.count
        self._reindex()

    def _trim(self, limit: int) -> None:
        while self.count > limit and self.replies:
            self.count -= len(self.replies.popleft())

    def _reindex(self) -> None:
        self.tokens: list[int] = [END]
        self._by_id: dict[int, list[int]] = {}
        self._by_pair: dict[int, list[int]] = {}
        for reply in self.replies:
            self._index_reply(reply)

    def _index_reply(self, reply: list[int]) -> None:
        tokens, by_id, by_pair = self.tokens, self._by_id, self._by_pair
        start = len(tokens)
        tokens.extend(reply)
        tokens.append(END)
        for j in range(start, start + len(reply)):
            by_id.setdefault(tokens[j], []).append(j)
            if j > start:
                by_pair.setdefault((tokens[j - 1] << 32) | tokens[j], []).append(j)

    # --- on disk
    def to_bytes(self) -> bytes:
        header = {"magic": MAGIC, "version": VERSION, "fingerprint": self.fingerprint,
                  "vocab_size": self.vocab_size, "tokens": self.count, "replies": len(self.replies)}
        body = array("I")
        for reply in self.replies:
            body.extend(reply)
            body.append(SEPARATOR)
        if sys.byteorder == "big":
            body.byteswap()
        return json.dumps(header).encode("ascii") + b"\n" + body.tobytes()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the store atomically: a 0600 temp file beside ``path``, then ``os.replace``."""
        path = Path(path)
        _private_dir(path.parent)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)  # left by a killed save with this pid
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.to_bytes())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def _private_dir(path: Path) -> None:
    """``path`` created 0700 where missing; one that exists (the user's home?) is not ours to tighten."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside ``path`` (``.<name>.lock``): one process at a time reads,
    merges and rewrites the store (no lock where the OS has no flock)."""
    _private_dir(path.parent)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                 FILE_MODE)
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)  # released with the descriptor
        yield
    finally:
        os.close(fd)


def load_store(path: str | os.PathLike[str], fingerprint: str, vocab_size: int,
               max_tokens: int = MAX_TOKENS) -> SuffixStore:
    """The store at ``path``, checked whole; SuffixStoreError (one line) when it is
    unreadable, damaged, or another tokenizer's."""
    path = Path(path)
    data = _read(path)
    newline = data.find(b"\n", 0, MAX_HEADER)
    if newline < 0:
        raise _damaged(path, "no header line")
    try:
        header = untrusted.json_value(data[:newline])
    except untrusted.Unreadable:
        raise _damaged(path, "its header is not JSON") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise SuffixStoreError("not a specchat suffix store", file=str(path),
                               hint="point speculation.suffix_store at a store specchat wrote, or remove the file")
    version = header.get("version")
    if type(version) is int and version > VERSION:
        raise NewerStoreError(f"the suffix store was written by a newer specchat (store version {version}; "
                              f"this one reads {VERSION})", file=str(path),
                              hint="upgrade specchat to draft from it, or point speculation.suffix_store elsewhere")
    if version != VERSION:
        raise _damaged(path, f"store version {str(version)[:20]!r}; this specchat reads {VERSION}")
    fields = {key: header.get(key) for key in ("vocab_size", "tokens", "replies")}
    if any(type(v) is not int or v < 0 for v in fields.values()) or not isinstance(header.get("fingerprint"), str):
        raise _damaged(path, "its header lacks a field or has one of the wrong type")
    if header["fingerprint"] != fingerprint or fields["vocab_size"] != vocab_size:
        raise SuffixStoreError("the suffix store was written for another tokenizer", file=str(path),
                               hint="remove it (specchat rebuilds its own), or point speculation.suffix_store "
                                    "at this model's store")
    body = data[newline + 1:]
    words = fields["tokens"] + fields["replies"]
    if len(body) != 4 * words:
        raise _damaged(path, f"{len(body)} bytes of ids where its header promises {4 * words}")
    ids = array("I")
    ids.frombytes(body)
    if sys.byteorder == "big":
        ids.byteswap()
    replies, reply = [], []
    for i in ids:
        if i == SEPARATOR:
            if not reply:
                raise _damaged(path, "an empty reply")
            replies.append(reply)
            reply = []
        elif i >= vocab_size:
            raise _damaged(path, f"id {i} is outside the vocabulary (size {vocab_size})")
        else:
            reply.append(i)
    if reply or len(replies) != fields["replies"]:
        raise _damaged(path, "its replies do not match its header")
    return SuffixStore(fingerprint, vocab_size, replies, max_tokens)


def _read(path: Path) -> bytes:
    try:
        info = os.stat(path)  # before opening: opening a FIFO would block
        if not stat.S_ISREG(info.st_mode):
            raise SuffixStoreError("not a regular file", file=str(path),
                                   hint="point speculation.suffix_store at a store file")
        if info.st_size > MAX_FILE:
            raise _damaged(path, f"{info.st_size:,} bytes, more than any store takes")
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise _damaged(path, "more bytes than any store takes")
        return data
    except OSError as exc:
        raise SuffixStoreError(f"cannot read the suffix store ({exc.strerror or exc})", file=str(path),
                               hint="check the path and its permissions") from None


def _damaged(path: Path, why: str) -> SuffixStoreError:
    return SuffixStoreError(f"damaged suffix store: {why}", file=str(path),
                            hint="remove it (specchat rebuilds its own), or point speculation.suffix_store elsewhere")
