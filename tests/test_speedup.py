"""Measured speed-ups that say when they cannot tell (specchat/speedup.py, contention.py).

The busy-machine check is driven by a fake machine reading (a simulated competing load
on a fake clock); the interval's coverage by simulated step times whose true speed-up is
known; the step bound by the very case a user saw: 70 tokens in 68 steps reported as
1.68× because the plain steps landed on busy moments."""

import random

import pytest

from specchat.contention import CpuShare
from specchat.events import StepStats
from specchat.speedup import StepSums, measured_speedup
from specchat.telemetry import Telemetry


class FakeMachine:
    """All cores' busy seconds, our CPU seconds and the wall clock, advanced by hand:
    ``others`` of the machine's cores are taken by other processes, ``ours`` by us."""

    def __init__(self, cpus=2, others=0.0, ours=1.0):
        self.cpus, self.others, self.ours = cpus, others, ours
        self.busy = self.own = self.wall = 0.0

    def tick(self, seconds):
        self.wall += seconds
        self.own += self.ours * seconds
        self.busy += (self.ours + self.others) * seconds

    def read(self):
        self.tick(0.010)  # each reading is 10 ms after the last: one step
        return self.busy, self.own, self.wall


def test_the_machine_is_read_at_most_every_interval_unless_asked_fresh():
    """Reading /proc/stat costs ~40 µs a step: at most one reading per ``every``; calls
    between get the last interval's share, and a turn's start asks for a fresh one."""
    machine = FakeMachine(cpus=2, others=1.0)
    reads = []
    share = CpuShare(read=lambda: reads.append(1) or machine.read(), cpus=2, every=3600.0)
    assert share.take() is None and len(reads) == 1
    assert share.take() is None and len(reads) == 1  # within the interval: the last share, no reading
    assert share.take(fresh=True) == pytest.approx(0.5) and len(reads) == 2
    machine.others = 0.0
    assert share.take() == pytest.approx(0.5) and len(reads) == 2
    assert share.take(fresh=True) == pytest.approx(0.0) and len(reads) == 3


def test_cpu_share_is_what_other_processes_took():
    machine = FakeMachine(cpus=2, others=1.5)
    share = CpuShare(read=machine.read, cpus=2)
    assert share.take() is None  # nothing to compare with yet
    assert share.take() == pytest.approx(0.75)
    machine.others = 0.0
    assert share.take() == pytest.approx(0.0)


def run_turn(others):
    """A plain-decoding turn of the tiny model with other processes taking ``others`` cores."""
    from tests.support.folded import FoldedEngine
    from specchat.engine import SamplingParams
    from tests.support.vocab16 import tiny_lm

    machine = FakeMachine(cpus=2, others=others)
    engine = FoldedEngine(tiny_lm(0), None, eos_token_ids=[], cpu_share=CpuShare(read=machine.read, cpus=2))
    list(engine.generate([1, 2, 3], SamplingParams(temperature=0), max_new_tokens=30))
    return engine.turn_metrics


def test_a_busy_machine_withholds_the_measured_speedup():
    busy = run_turn(others=1.6)
    assert busy.busy_machine is True and busy.cpu_others == pytest.approx(0.8)
    assert busy.measured_speedup is None and busy.measured_speedup_note.startswith("busy machine")
    quiet = run_turn(others=0.0)
    assert quiet.busy_machine is False and quiet.measured_speedup == pytest.approx(1.0)


def test_a_speedup_above_what_the_steps_allow_is_noise():
    """70 tokens in 68 steps cannot be 1.68× faster than one token per step."""
    t = Telemetry(max_gamma=4)
    for i in range(68):
        if i % 17 == 5:  # plain steps that landed on busy moments: 2.6× slower
            t.update(StepStats(0, 0, 0, total_ms=26.0, verify_ms=26.0), 1)
        else:
            t.update(StepStats(2, 2, 0, total_ms=16.0, verify_ms=15.0, draft_ms=1.0), 2 if i in (10, 40) else 1)
    m = t.snapshot()
    assert m.num_tokens == 70 and m.num_steps == 68
    assert m.measured_speedup is None, m.measured_speedup
    assert "cannot tell" in m.measured_speedup_note and "1.03 tokens a step" in m.measured_speedup_note


def test_too_few_steps_say_so():
    t = Telemetry(max_gamma=4)
    t.update(StepStats(0, 0, 0, total_ms=10.0), 1)
    m = t.snapshot()
    assert m.measured_speedup is None and m.measured_speedup_note.startswith("too early")


def test_the_interval_covers_the_true_speedup():
    """Plain steps of 10 ms and steps of 15 ms that emit 2 tokens (true speed-up 4/3),
    each with 10 % noise: the 95 % interval holds 4/3 in about 95 % of turns."""
    true = 2 * 10.0 / 15.0
    covered = 0
    turns = 300
    for seed in range(turns):
        rng = random.Random(seed)
        steps, plain = StepSums(), []
        for i in range(120):
            if i % 10 == 0:
                ms = rng.gauss(10.0, 1.0)
                plain.append(ms)
                steps.add(1, ms)
            else:
                steps.add(2, rng.gauss(15.0, 1.5))
        measured = measured_speedup(steps, plain, others=0.0)
        lo, hi = measured.interval
        covered += lo <= true <= hi
    assert 0.90 <= covered / turns <= 0.99, covered / turns
