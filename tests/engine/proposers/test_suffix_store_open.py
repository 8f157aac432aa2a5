"""Which store a chat gets (engine/proposers/suffix_store_open.py): "auto" is built from
recordings and rebuilt, with one line, when damaged or foreign; a store the profile names
is never replaced, and a bad one ends ``specchat run`` with one line and exit code 2."""

from __future__ import annotations

import itertools
import json
import stat

import pytest

from specchat.engine.proposers.suffix_store import SuffixStore, SuffixStoreError, load_store, tokenizer_fingerprint
from specchat.engine.proposers.suffix_store_open import auto_path, open_store
from specchat.events import SessionHeader, Step, StepEvent, StepStats, Token, TurnFinished, TurnStarted
from specchat.sessions.fileformat import sessions_dir
from specchat.sessions.recorder import Recorder
from specchat.sessions.suffix_replies import recorded_replies
from tests.support.cli import assert_one_line_error, in_process
from tests.support.tiny_models import write_tiny_profile


NUMBERS = itertools.count()


class Vocab:
    def get_vocab(self):
        return {f"t{i}": i for i in range(50)}


def record_chat(source: str, replies: list[list[int]]) -> None:
    stats = StepStats(num_speculative_tokens=0, num_draft_tokens=0, num_accepted_tokens=0)
    with Recorder(sessions_dir() / f"chat-{next(NUMBERS)}.jsonl") as recorder:
        recorder.start(SessionHeader(specchat_version="test", profile={"name": "p", "target": {"source": source}}))
        for turn, reply in enumerate(replies, 1):
            recorder.record(TurnStarted(turn, 3))
            step = Step(tuple(Token(i, "target") for i in reply), stats)
            recorder.record(StepEvent(turn, step, 0.0))
            recorder.record(TurnFinished(turn, "eos", ""))


def test_off_is_no_store():
    assert open_store("off", Vocab(), "m") is None


def test_auto_is_built_from_the_same_models_recordings_and_saved_private():
    record_chat("m", [[1, 2, 3], [4, 5]])
    record_chat("other-model", [[9, 9, 9]])
    opened = open_store("auto", Vocab(), "m", recorded=recorded_replies)
    assert list(opened.store.replies) == [[1, 2, 3], [4, 5]] and opened.notice is None
    assert opened.path == auto_path(tokenizer_fingerprint(Vocab())[0])
    assert stat.S_IMODE(opened.path.stat().st_mode) == 0o600
    opened.remember([6, 7])  # a finished reply: the next chat opens it
    assert list(open_store("auto", Vocab(), "m", recorded=recorded_replies).store.replies)[-1] == [6, 7]


@pytest.mark.parametrize("damage", ["corrupt", "nested", "foreign"])
def test_a_bad_auto_store_is_one_line_and_rebuilt(damage):
    record_chat("m", [[1, 2, 3]])
    fingerprint, vocab = tokenizer_fingerprint(Vocab())
    path = auto_path(fingerprint)
    path.parent.mkdir(parents=True)
    if damage == "corrupt":
        path.write_bytes(b'{"magic": "specchat-suffix-store"\n\x00')
    elif damage == "nested":  # a header past the JSON decoder's depth (RecursionError)
        path.write_bytes(b'{"magic": ' + b"[" * 1500 + b"]" * 1500 + b"}\n")
    else:
        SuffixStore("cd" * 32, vocab, [[8, 8]]).save(path)
    opened = open_store("auto", Vocab(), "m", recorded=recorded_replies)
    assert list(opened.store.replies) == [[1, 2, 3]]
    assert "\n" not in opened.notice and str(path) in opened.notice and "rebuilt" in opened.notice
    assert list(load_store(path, fingerprint, vocab).replies) == [[1, 2, 3]]  # the bad file is gone


def test_a_named_store_is_created_on_the_first_reply_relative_to_the_profile(tmp_path):
    opened = open_store("stores/mine.bin", Vocab(), "m", base=tmp_path)
    assert opened.path == tmp_path / "stores" / "mine.bin" and not opened.path.exists()
    opened.remember([1, 2])
    assert stat.S_IMODE(opened.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(opened.path.parent.stat().st_mode) == 0o700  # a folder it made


def test_a_named_store_leaves_the_users_own_folder_as_it_was(tmp_path):
    tmp_path.chmod(0o755)  # say, their home
    opened = open_store("mine.bin", Vocab(), "m", base=tmp_path)
    opened.remember([1, 2])
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755 and stat.S_IMODE(opened.path.stat().st_mode) == 0o600


@pytest.mark.parametrize("damage", ["corrupt", "foreign"])
def test_a_bad_named_store_is_an_error_and_left_alone(tmp_path, damage):
    path = tmp_path / "mine.bin"
    if damage == "corrupt":
        path.write_bytes(b"not a store")
    else:
        SuffixStore("cd" * 32, 50, [[8, 8]]).save(path)
    before = path.read_bytes()
    with pytest.raises(SuffixStoreError):
        open_store(str(path), Vocab(), "m")
    assert path.read_bytes() == before


def _profile(tmp_path, tiny_model_dir, store: str):
    path = write_tiny_profile(tmp_path / "suffix.toml", tiny_model_dir, method="suffix")
    text = path.read_text().replace('method = "suffix"', f'method = "suffix"\nsuffix_store = {json.dumps(store)}')
    path.write_text(text)
    return path


@pytest.mark.parametrize("damage, words", [("foreign", "another tokenizer"), ("corrupt", "damaged")])
def test_run_with_a_bad_named_store_is_one_line_and_exit_2(tmp_path, tiny_model_dir, damage, words):
    store = tmp_path / "mine.bin"
    SuffixStore("cd" * 32, 7, [[1, 2]]).save(store)
    if damage == "corrupt":
        store.write_bytes(b"\x00" * 16)
    result = in_process("run", "--profile", str(_profile(tmp_path, tiny_model_dir, str(store))),
                        "--prompt", "hi", "--max-new-tokens", "2", "--no-record")
    assert_one_line_error(result, str(store), words)


def test_run_with_auto_keeps_the_reply_in_the_store(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    result = in_process("run", "--profile", str(_profile(tmp_path, tiny_model_dir, "auto")),
                        "--prompt", "hi", "--max-new-tokens", "6", "--json")
    assert result.returncode == 0, result.stderr
    reply = [json.loads(line)["id"] for line in result.stdout.splitlines()[:-1]]
    fingerprint, vocab = tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_model_dir))
    assert list(load_store(auto_path(fingerprint), fingerprint, vocab).replies) == [reply]


def test_run_with_a_damaged_auto_store_warns_once_and_rebuilds_it(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    fingerprint, vocab = tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_model_dir))
    path = auto_path(fingerprint)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00" * 40)
    result = in_process("run", "--profile", str(_profile(tmp_path, tiny_model_dir, "auto")),
                        "--prompt", "hi", "--max-new-tokens", "4")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "suffix store" in line]
    assert len(warnings) == 1 and "rebuilt" in warnings[0] and str(path) in warnings[0]
    assert load_store(path, fingerprint, vocab).count > 0  # rebuilt, with this reply in it


def test_run_says_when_the_store_could_not_be_saved(tmp_path, tiny_model_dir):
    """The store is saved after the reply; a chat says a failure with its next turn, and
    `run`, which has none, on stderr before it exits."""
    (tmp_path / "a-file").write_text("")
    store = tmp_path / "a-file" / "store.bin"  # its folder is a file: the save fails
    result = in_process("run", "--profile", str(_profile(tmp_path, tiny_model_dir, str(store))),
                        "--prompt", "hi", "--max-new-tokens", "4")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("specchat: warning:")]
    assert len(warnings) == 1 and str(store) in warnings[0], result.stderr


def _store_files(tiny_model_dir, tmp_path, setting: str):
    """(the store's path, its bytes now or None when absent) for ``setting``."""
    from transformers import AutoTokenizer

    path = auto_path(tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_model_dir))[0]) if setting == "auto" \
        else tmp_path / setting
    return path, path.read_bytes() if path.exists() else None


@pytest.mark.parametrize("setting, before", [("auto", None), ("auto", "damaged"), ("mine.bin", None),
                                             ("mine.bin", "replies")])
def test_run_no_record_leaves_the_store_as_it_was(tmp_path, tiny_model_dir, setting, before):
    """A user who asks not to record a chat expects nothing of it kept: not its reply, not
    even a repair of the store (a rebuild from other chats is for this chat only)."""
    from transformers import AutoTokenizer

    path, _ = _store_files(tiny_model_dir, tmp_path, setting)
    fingerprint, vocab = tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_model_dir))
    if before == "damaged":
        path.parent.mkdir(parents=True)
        path.write_bytes(b"\x00" * 40)
    elif before == "replies":
        SuffixStore(fingerprint, vocab, [[1, 2, 3]]).save(path)
    _, was = _store_files(tiny_model_dir, tmp_path, setting)
    result = in_process("run", "--profile", str(_profile(tmp_path, tiny_model_dir, setting)),
                        "--prompt", "hi", "--max-new-tokens", "6", "--no-record")
    assert result.returncode == 0, result.stderr
    assert _store_files(tiny_model_dir, tmp_path, setting)[1] == was
    if before == "damaged":
        (warning,) = [line for line in result.stderr.splitlines() if "suffix store" in line]
        assert "not saved" in warning


def test_a_chat_not_recorded_in_the_tui_leaves_the_store_as_it_was(tmp_path, tiny_model_dir):
    """The TUI's ``specchat --no-record`` (LiveLoader(record=False)), across a profile switch too."""
    from specchat.live import LiveLoader

    profile = str(_profile(tmp_path, tiny_model_dir, "mine.bin"))
    loader = LiveLoader(record=False)
    for _ in range(2):  # the second call is a profile switch, carrying on the chat
        backend = loader(profile, lambda _: None).backend
        assert any(type(event).__name__ == "TurnFinished" for event in backend.send("hi"))
    backend.close()
    assert not (tmp_path / "mine.bin").exists()
