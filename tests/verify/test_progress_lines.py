"""verify's progress on stderr, as a log and as a terminal see it (issue 59: a log sat at
"choosing the prompt: 0/1" while minutes of sampling ran)."""

import pytest

from specchat.commands.verify import _Progress

# the reports verify.single makes, in order, up to the first samples
REPORTS = [(0, 1, "choosing the prompt"), (0, 1, "exact law of the sampler"),
           (0, 6000, "speculative samples"), (50, 6000, "speculative samples"), (100, 6000, "speculative samples")]


def test_a_log_gets_a_line_at_each_new_stage_and_not_one_per_report(capsys):
    """(Planted: a line per tenth of the work alone, as before, leaves the log at
    "choosing the prompt" here.)"""
    progress = _Progress(terminal=False)
    for report in REPORTS:
        progress(*report)
    assert capsys.readouterr().err.splitlines() == [
        "verify: choosing the prompt: 0/1 (0 %)", "verify: exact law of the sampler: 0/1 (0 %)",
        "verify: speculative samples: 0/6000 (0 %)"]


def test_a_log_gets_a_line_while_a_stage_runs_long(capsys, monkeypatch):
    import specchat.commands.verify as verify_command

    clock = iter([0.0, 10.0, 45.0])
    monkeypatch.setattr(verify_command.time, "monotonic", lambda: next(clock))
    progress = _Progress(terminal=False, every_s=30.0)
    for done in (0, 50, 100):
        progress(done, 6000, "plain samples")
    assert [line.split(": ")[-1] for line in capsys.readouterr().err.splitlines()] == ["0/6000 (0 %)", "100/6000 (1 %)"]


@pytest.mark.parametrize("report", REPORTS)
def test_a_terminal_sees_every_report_on_one_line(capsys, report):
    _Progress(terminal=True)(*report)
    assert capsys.readouterr().err == f"\r{report[2]}: {report[0]}/{report[1]}   "
