"""The suffix store file with more than one writer, a save that fails midway, and a
newer specchat's store (issue 59: item 4, item 8, and "the suffix store rewritten in place").

* Two chats on one store keep each other's replies: each save re-reads the file under a
  lock and adds what is new. Planted bug: ``save`` of the chat's own copy alone (no
  merge) — the file ends with one process's replies.
* A save that fails midway (the file-size limit, as a full disk would) leaves the old
  store whole: temp file, then ``os.replace``. Planted bug: the file rewritten in place.
* A store written by a newer version is said to be newer, never "damaged — remove it",
  and "auto" leaves it as it is. Planted bug: the version check calling it damaged.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from specchat.engine.proposers.suffix_store import NewerStoreError, SuffixStore, load_store, tokenizer_fingerprint
from specchat.engine.proposers.suffix_store_open import auto_path, open_store
from tests.support import ROOT



class Vocab:
    def get_vocab(self):
        return {f"t{i}": i for i in range(50)}


FINGERPRINT, VOCAB = tokenizer_fingerprint(Vocab())


def replies_on_disk(path) -> list[list[int]]:
    return [list(r) for r in load_store(path, FINGERPRINT, VOCAB).replies]


def test_two_chats_opened_together_keep_each_others_replies(tmp_path):
    path = tmp_path / "store.bin"
    first, second = open_store(str(path), Vocab(), "m"), open_store(str(path), Vocab(), "m")
    assert first.remember([1, 2, 3]) is None
    assert second.remember([4, 5, 6]) is None
    assert first.remember([7, 8, 9]) is None
    assert replies_on_disk(path) == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert first.store.positions([4, 5]), "the other chat's reply is drafted from too"


WRITER = """
import pathlib, sys, time
from specchat.engine.proposers.suffix_store_open import open_store
class Vocab:
    def get_vocab(self):
        return {f"t{i}": i for i in range(50)}
path, base, go = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
opened = open_store(path, Vocab(), "m")
pathlib.Path(f"{path}.ready{base}").touch()
while not go.exists():
    time.sleep(0.01)
for i in range(12):
    assert opened.remember([base + i, base + i, 7]) is None
"""


def test_two_processes_saving_at_once_lose_no_reply(tmp_path):
    path, go = tmp_path / "store.bin", tmp_path / "go"
    SuffixStore(FINGERPRINT, VOCAB, [[1, 1]]).save(path)  # both open this one, then write at once
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(base), str(go)], cwd=ROOT)
             for base in (10, 30)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"store.bin.ready{base}").exists() for base in (10, 30)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    go.touch()
    assert [p.wait(120) for p in procs] == [0, 0]
    kept = replies_on_disk(path)
    assert sorted(map(tuple, kept)) == sorted([(1, 1)] + [(b + i, b + i, 7) for b in (10, 30) for i in range(12)])


CUT_SAVE = """
import resource, signal, sys
from specchat.engine.proposers.suffix_store import SuffixStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    SuffixStore(sys.argv[2], 50, [[i % 50 for i in range(4000)]]).save(sys.argv[1])
except OSError:
    sys.exit(3)
"""


def test_a_save_that_fails_midway_leaves_the_old_store_whole(tmp_path):
    path = tmp_path / "store.bin"
    SuffixStore(FINGERPRINT, VOCAB, [[1, 2, 3]]).save(path)
    result = subprocess.run([sys.executable, "-c", CUT_SAVE, str(path), FINGERPRINT], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert replies_on_disk(path) == [[1, 2, 3]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.bin"]


def newer(path) -> bytes:
    data = SuffixStore(FINGERPRINT, VOCAB, [[1, 2, 3]]).to_bytes().replace(b'"version": 1', b'"version": 2')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def test_a_newer_versions_store_is_called_newer_and_left_as_it_is(tmp_path):
    newer(tmp_path / "named.bin")
    with pytest.raises(NewerStoreError) as caught:
        load_store(tmp_path / "named.bin", FINGERPRINT, VOCAB)
    assert "newer specchat" in str(caught.value) and "damaged" not in str(caught.value)
    assert "upgrade" in str(caught.value)

    path = auto_path(FINGERPRINT)
    data = newer(path)
    opened = open_store("auto", Vocab(), "m", recorded=lambda source: [[4, 5]])
    assert "newer specchat" in opened.notice and "damaged" not in opened.notice
    assert opened.remember([6, 7]) is None and not opened.keep
    assert path.read_bytes() == data
    assert opened.store.positions([4, 5])  # the chat still drafts from its recordings
