"""``train-head --out DIR`` touches only what it made, and says so before the model loads.

Planted bugs each test kills: ``shutil.rmtree(out / "work")`` on any fresh run (a user's
own ``work`` folder lost); ``json.loads`` of each ``distilled.jsonl`` line unchecked
(JSONDecodeError on --resume); no check of ``--out`` or of ``work`` before the load
(NotADirectoryError and OSError tracebacks after it); mkdir unguarded (an --out under a file);
``read_text`` of a ``distilled.jsonl`` that is no regular file (a folder, a FIFO: blocked).
"""

import contextlib
import json

import pytest

from specchat.errors import SpecchatError
from specchat.training.workdir import MARKER, prepare_work, read_distilled
from tests.support.cli import assert_one_line_error, in_process
from tests.support.fifo import fed_fifo


def test_a_work_folder_specchat_did_not_make_is_left_whole(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "thesis.tex").write_text("years of it")
    with pytest.raises(SpecchatError, match="not made by train-head") as caught:
        prepare_work(tmp_path, resume=False)
    assert str(tmp_path / "work") in str(caught.value)
    assert (tmp_path / "work" / "thesis.tex").read_text() == "years of it"


def test_a_work_folder_specchat_made_is_cleared_for_a_fresh_run(tmp_path):
    work = prepare_work(tmp_path, resume=False)
    (work / "distilled.jsonl").write_text("{}\n")
    assert prepare_work(tmp_path, resume=False) == work
    assert sorted(p.name for p in work.iterdir()) == [MARKER]
    (tmp_path / "empty" / "work").mkdir(parents=True)  # an empty folder loses nothing
    assert prepare_work(tmp_path / "empty", resume=False).is_dir()


def test_a_work_link_and_an_out_file_are_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "work").symlink_to(elsewhere)
    with pytest.raises(SpecchatError, match="link or a file"):
        prepare_work(tmp_path / "out", resume=False)
    with pytest.raises(SpecchatError, match="link or a file"):
        prepare_work(tmp_path / "out", resume=True)
    assert (elsewhere / "keep").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecchatError, match="names a file"):
        prepare_work(tmp_path / "file", resume=False)


def row(index: int) -> str:
    return json.dumps({"index": index, "prompt": index, "replies": 1, "greedy": True, "ids": [1, 2], "reply_start": 1})


@pytest.mark.parametrize("line", ["garbage", "[1, 2]", '{"index": "0"}', ""])
def test_a_distilled_line_that_is_no_row_is_one_line_on_resume(tmp_path, line):
    work = prepare_work(tmp_path, resume=False)
    (work / "distilled.jsonl").write_text(f"{row(0)}\n{line}\n{row(1)}\n")
    with pytest.raises(SpecchatError, match="not a row") as caught:
        prepare_work(tmp_path, resume=True)
    assert caught.value.line == 2 and "distilled.jsonl" in str(caught.value)


def test_a_line_cut_by_a_kill_is_dropped_and_redone(tmp_path):
    path = tmp_path / "distilled.jsonl"
    path.write_text(f"{row(0)}\n{row(1)[:17]}")
    assert [r["index"] for r in read_distilled(path)] == [0]
    assert path.read_text() == f"{row(0)}\n"  # the next row appended starts on a line of its own


def test_the_cli_refuses_before_the_model_loads(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("mine")
    result = in_process("train-head", "--profile", "default", "--out", str(tmp_path))
    assert_one_line_error(result, "not made by train-head", str(tmp_path / "work"))
    assert "[load]" not in result.stderr and (tmp_path / "work" / "notes.txt").exists()


def test_an_out_under_a_file_is_one_line(tmp_path):
    # replayed by hand (docs/trials/2026-12-07-adversarial-replay): NotADirectoryError from mkdir
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecchatError, match="cannot make the work folder") as caught:
        prepare_work(tmp_path / "file" / "sub", resume=False)
    assert str(tmp_path / "file" / "sub" / "work") in str(caught.value)
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_distilled_path_that_is_no_file_is_one_line_on_resume(tmp_path, kind):
    # replayed by hand: a folder was an IsADirectoryError, a FIFO blocked the read forever
    # (here a writer thread feeds the FIFO, so a planted read ends, with the wrong words)
    work = prepare_work(tmp_path, resume=False)
    path = work / "distilled.jsonl"
    if kind == "folder":
        path.mkdir()
    with fed_fifo(path, b"no row\n") if kind == "fifo" else contextlib.nullcontext():
        with pytest.raises(SpecchatError, match="not a regular file") as caught:
            prepare_work(tmp_path, resume=True)
    assert "distilled.jsonl" in str(caught.value)
