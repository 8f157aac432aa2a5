"""The global suffix store (engine/proposers/suffix_store.py): its file round-trips, is
private, stays bounded, and any damage or another tokenizer's store is one line; suffix
decoding drafts from it where the request's own context has nothing to copy."""

from __future__ import annotations

import json
import stat

import pytest

from specchat.engine.proposers.suffix import SuffixProposer
from specchat.engine.proposers.suffix_store import (MAGIC, SuffixStore, SuffixStoreError, load_store,
                                                    tokenizer_fingerprint)

FP, VOCAB = "ab" * 32, 100


class Vocab:
    def __init__(self, words):
        self.words = words

    def get_vocab(self):
        return {w: i for i, w in enumerate(self.words)}


def saved(tmp_path, replies=([1, 2, 3], [4, 5]), **kw):
    path = tmp_path / "store" / "s.bin"
    SuffixStore(FP, VOCAB, replies, **kw).save(path)
    return path


def test_round_trip_keeps_replies_in_order(tmp_path):
    path = saved(tmp_path)
    store = load_store(path, FP, VOCAB)
    assert list(store.replies) == [[1, 2, 3], [4, 5]] and store.count == 5
    assert store.positions([2, 3]) == [3] and store.positions([1, 2, 3]) == [3] and store.positions([3, 4]) == []


def test_the_file_is_0600_in_a_0700_dir_and_no_temp_file_stays(tmp_path):
    path = saved(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["s.bin"]


def test_the_bound_holds_and_the_oldest_replies_go_first(tmp_path):
    store = SuffixStore(FP, VOCAB, max_tokens=10)
    for r in range(8):
        store.add([r] * 3)
        assert store.count <= 10
    assert list(store.replies)[-1] == [7] * 3 and [0] * 3 not in store.replies
    # the index follows the trim: nothing points at a dropped reply
    assert store.positions([0]) == [] and all(store.tokens[j] == 7 for j in store.positions([7]))
    path = tmp_path / "s.bin"
    store.save(path)
    assert load_store(path, FP, VOCAB).count == store.count


def test_ids_outside_the_vocabulary_are_not_kept():
    store = SuffixStore(FP, VOCAB)
    store.add([1, 2, VOCAB, 3])
    assert list(store.replies) == [[1, 2]]


def test_the_fingerprint_follows_every_token_string():
    assert tokenizer_fingerprint(Vocab(["a", "b"])) == tokenizer_fingerprint(Vocab(["a", "b"]))
    assert tokenizer_fingerprint(Vocab(["a", "b"]))[0] != tokenizer_fingerprint(Vocab(["a", "c"]))[0]
    assert tokenizer_fingerprint(Vocab(["a", "b"]))[1] == 2


def _rewrite(path, mutate):
    data = path.read_bytes()
    head, body = data.split(b"\n", 1)
    header = json.loads(head)
    header, body = mutate(header, body)
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


DAMAGE = {
    "garbage": lambda p: p.write_bytes(b"\x00\xff" * 50),
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-3]),
    "wrong magic": lambda p: _rewrite(p, lambda h, b: ({**h, "magic": "other"}, b)),
    "newer version": lambda p: _rewrite(p, lambda h, b: ({**h, "version": 9}, b)),
    "count off": lambda p: _rewrite(p, lambda h, b: ({**h, "tokens": h["tokens"] + 1}, b + b"\x01\0\0\0")),
    "field type": lambda p: _rewrite(p, lambda h, b: ({**h, "tokens": "5"}, b)),
    "id past vocab": lambda p: _rewrite(p, lambda h, b: (h, VOCAB.to_bytes(4, "little") + b[4:])),
    "no separator": lambda p: _rewrite(p, lambda h, b: (h, b[:-4] + b"\x01\0\0\0")),
    "nested header": lambda p: p.write_bytes(b"[" * 1500 + b"]" * 1500 + b"\n"),  # within MAX_HEADER; RecursionError
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_store_is_one_line_naming_the_file(tmp_path, damage):
    path = saved(tmp_path)
    DAMAGE[damage](path)
    with pytest.raises(SuffixStoreError) as caught:
        load_store(path, FP, VOCAB)
    line = str(caught.value)
    assert "\n" not in line and str(path) in line and "—" in line  # the file, then the fix


@pytest.mark.parametrize("fingerprint, vocab", [("cd" * 32, VOCAB), (FP, VOCAB + 1)])
def test_another_tokenizers_store_is_refused(tmp_path, fingerprint, vocab):
    with pytest.raises(SuffixStoreError, match="another tokenizer"):
        load_store(saved(tmp_path), fingerprint, vocab)


def test_a_directory_or_a_missing_file_is_one_line(tmp_path):
    for path in (tmp_path, tmp_path / "absent.bin"):
        with pytest.raises(SuffixStoreError) as caught:
            load_store(path, FP, VOCAB)
        assert "\n" not in str(caught.value)


def test_the_header_is_json_with_the_magic(tmp_path):
    head = saved(tmp_path).read_bytes().split(b"\n", 1)[0]
    assert json.loads(head)["magic"] == MAGIC


def test_a_second_chat_drafts_from_the_first_chats_reply_through_the_store():
    reply = [40, 41, 42, 43, 44, 45, 46]
    store = SuffixStore(FP, VOCAB)
    first = SuffixProposer(6, 1, 3, store=store)
    first.lookup([1, 2, 3] + reply, 6)
    store.add(reply)  # the first chat's reply, finished
    context = [7, 8, 9, 40, 41]  # a new chat: its own context has no earlier 40, 41
    alone, _ = SuffixProposer(6, 1, 3).lookup(context, 6)
    assert alone == []
    draft, match = SuffixProposer(6, 1, 3, store=store).lookup(context, 6)
    assert draft == [42, 43, 44, 45, 46] and match.length == 2  # stops where the reply ended


def test_the_context_outvotes_the_store_and_a_split_stops_the_draft():
    store = SuffixStore(FP, VOCAB, [[5, 6, 7, 8]])
    proposer = SuffixProposer(6, 1, 3, store=store)
    draft, match = proposer.lookup([5, 6, 9, 1, 5, 6], 6)
    # one occurrence each, split 1:1: the context's (→ 9, the latest) wins the tie
    assert draft == [9, 1, 5, 6] and proposer.shares[0] == 0.5 and match.rival == 1
    proposer.observe(0)
    draft, _ = proposer.lookup([5, 6, 9, 2, 5, 6, 9, 3, 5, 6], 6)
    assert draft[0] == 9 and proposer.shares[0] == pytest.approx(2 / 3)


def test_drafts_are_only_ids_never_the_stores_reply_end():
    store = SuffixStore(FP, VOCAB, [[3, 4], [3, 4], [3, 5, 6]])
    draft, _ = SuffixProposer(6, 1, 3, store=store, min_score=0.0).lookup([9, 3], 6)
    assert draft == [4] and all(0 <= t < VOCAB for t in draft)


def test_a_store_id_the_target_has_no_row_for_is_never_drafted():
    store = SuffixStore(FP, VOCAB, [[3, 4, 60, 5]])
    proposer = SuffixProposer(6, 1, 3, store=store)
    proposer.vocab_size = 50  # the engine's: the target's rows
    draft, _ = proposer.lookup([9, 3], 6)
    assert draft == [4]
