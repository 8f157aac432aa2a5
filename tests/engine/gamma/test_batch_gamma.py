"""γ = auto for a batch (engine/gamma/batch_plan.py): drafts chosen by the marginal cost of
the batch's rows, measured, so the same acceptance that pays alone stops paying in a big
batch, and plain decoding wins there.

The step times here are fed as a decode measured at its size would report them; the
acceptance is the n-gram prior of a 2-token match (0.54 a draft) unless said otherwise.
Planted bug named by the crossover test: pricing a sequence's drafts as a one-sequence
step of k drafts (ignoring the batch's other rows) keeps drafting at N = 8.
"""

from __future__ import annotations

from specchat.engine.gamma.batch_plan import BatchGamma
from specchat.engine.proposers import Candidate
from specchat.engine.proposers.ngram_index import NgramMatch


def offer(length: int = 2, limit: int = 5) -> Candidate:
    return Candidate("ngram", limit, NgramMatch(length=length))


def taught(cost, sizes, draft_ms: float = 0.05, extra=None, drafts=range(1, 12), single: bool = False) -> BatchGamma:
    """A plan that measured plain steps of ``sizes`` rows at ``cost(rows)`` ms and, beside
    the smallest, steps of m drafts adding ``extra(m)`` ms (default: ``cost``'s rows), in one
    pass (``single``: every sequence drafted alike, or one sequence alone) or a pass of their own."""
    sizes = list(sizes)
    extra = extra or (lambda m: cost(sizes[0] + m) - cost(sizes[0]))
    gamma = BatchGamma(max_gamma=5)
    for _ in range(3):
        for rows in sizes:
            gamma.observe_batch(rows, cost(rows), 0.0, False, [])
        for m in drafts:
            gamma._shape = single  # as the plan that drafted them would have said
            gamma.observe_batch(sizes[0] + m, cost(sizes[0]) + extra(m), draft_ms * m, False, [(m, 0)])
    return gamma


def cpu_like(rows: int) -> float:
    """Two cores: a decode is compute-bound already at a few rows, 10 ms + 2 ms a row."""
    return 10.0 + 2.0 * rows


def test_the_same_acceptance_pays_alone_and_not_in_a_big_batch():
    alone = taught(cpu_like, range(1, 12), single=True).plan([offer()], pending_rows=1)
    assert sum(alone.drafts) >= 1 and alone.gain > 1.0
    batch = taught(cpu_like, range(1, 30)).plan([offer() for _ in range(8)], pending_rows=8)
    assert batch.drafts == [0] * 8, "a draft kept half the time cannot pay for its row beside 8 others"
    assert batch.gain == 1.0 and batch.cost == 1.0
    assert abs(batch.marginal_ms - 2.0) < 1e-9  # what one draft adds, as the panel shows it


def test_likely_drafts_still_pay_in_a_batch_and_go_where_they_are_likeliest():
    gamma = taught(cpu_like, range(1, 40))
    plan = gamma.plan([offer(length=16), offer(length=1), None, offer(length=16)], pending_rows=4)
    assert plan.drafts[0] > 0 and plan.drafts[3] > 0, "a long quote's drafts (0.91 each) pay"
    assert plan.drafts[1] == 0 and plan.drafts[2] == 0, "a one-token match's (0.2) and a miss do not"
    assert plan.tokens[0] > 1.0 and plan.tokens[1] == 1.0
    assert plan.gain > 1.0 and plan.cost > 1.0


def test_a_sequence_never_drafts_past_its_limit():
    gamma = taught(lambda rows: 10.0 + 0.01 * rows, range(1, 40))  # rows nearly free: draft deep
    plan = gamma.plan([offer(length=16, limit=2), offer(length=16, limit=5)], pending_rows=2)
    assert plan.drafts == [0, 5]  # five likely drafts beat two each for both (a sequence drafts k or none)


def test_first_steps_measure_before_they_predict():
    gamma = BatchGamma(max_gamma=5)
    first = gamma.plan([offer(), offer()], pending_rows=2)
    assert first.drafts == [0, 0] and first.gain is None  # nothing measured: a plain step
    gamma.observe_batch(2, 14.0, 0.1, False, [(0, 0), (0, 0)])
    second = gamma.plan([offer(), offer()], pending_rows=2)
    assert sum(second.drafts) == 1  # explore: what one draft adds, and a draft's cost
    gamma.observe_batch(3, 19.0, 0.1, False, [(1, 1), (0, 0)])
    assert gamma.extra_time(1) == 5.0 and gamma.extra_time(3) == 15.0 and gamma.draft_ms.value == 0.1
    assert gamma.recommendation() == (None, None)


def test_a_ragged_batchs_extra_pass_is_measured_not_assumed_from_rows():
    """llama.cpp without a unified cache runs a draft beside 8 plain rows in a pass of its
    own (~19 ms on two cores, where a row of the plain pass costs ~5): priced by rows, a
    well-kept draft would look worth it; priced as measured, it is not."""
    rows_cost = lambda rows: 9.0 + 5.0 * rows  # noqa: E731 — 49 ms at 8 rows
    by_rows = taught(rows_cost, range(8, 20), extra=lambda m: 5.0 * m)
    measured = taught(rows_cost, range(8, 20), extra=lambda m: 13.0 + 6.5 * m)
    offers = [offer(length=16) for _ in range(8)]  # 0.91 a draft
    assert sum(by_rows.plan(offers, pending_rows=8).drafts) > 0
    assert measured.plan(offers, pending_rows=8).drafts == [0] * 8


def test_a_prompt_step_is_no_sample_of_the_cost():
    gamma = BatchGamma(max_gamma=5)
    gamma.observe_batch(300, 900.0, 0.0, True, [(0, 0)])
    assert gamma.plain_ms == {} and gamma.extra_ms == {}


def test_plain_decoding_probes_now_and_then_and_learns_from_the_verdicts():
    gamma = taught(cpu_like, range(1, 30), extra=lambda m: 1.0 * m)  # a cheap draft: probes as often as asked
    gamma.probe_every = 4
    plans = [gamma.plan([offer(length=1) for _ in range(8)], pending_rows=8) for _ in range(4)]
    assert [sum(p.drafts) for p in plans] == [0, 0, 0, 1]
    assert gamma.recommendation()[0] == 0
    # every sequence's drafts kept, step after step: the estimate climbs and drafting pays
    for _ in range(40):
        plan = gamma.plan([offer(length=1) for _ in range(8)], pending_rows=8)
        gamma.observe_batch(8 + sum(plan.drafts), cpu_like(8 + sum(plan.drafts)), 0.1 * max(1, sum(plan.drafts)), False,
                      [(k, k) for k in plan.drafts])
    assert sum(plan.drafts) >= 4 and gamma.recommendation()[0] == "auto"


def test_the_panel_and_run_json_show_the_batch_and_a_rows_cost():
    from specchat.events import StepStats
    from specchat.telemetry import Telemetry
    from specchat.ui.figures import controller_text

    telemetry = Telemetry(max_gamma=5)
    telemetry.update(StepStats(2, 2, 1, total_ms=30.0, batch_size=4, marginal_ms=0.912), 2)
    snapshot = telemetry.snapshot()
    assert snapshot.to_dict()["batch_size"] == 4 and snapshot.to_dict()["marginal_ms"] == 0.912
    assert controller_text(snapshot).endswith("\nbatch: 4 chats, a draft's row +0.91 ms")
    alone = Telemetry(max_gamma=5)
    alone.update(StepStats(2, 2, 1, total_ms=30.0), 2)
    assert "batch" not in controller_text(alone.snapshot())


def test_a_dear_probe_comes_rarely():
    """Beside 8 plain rows one draft is a pass of its own (+19.5 ms on a 49 ms step here):
    probing every 24 steps would spend 1.7 % of the time on probes, so they are spaced to
    stay within PROBE_BUDGET (1 %): 40 steps apart. Planted bug: a fixed probe_every
    probes at step 24 and fails this."""
    gamma = taught(lambda rows: 9.0 + 5.0 * rows, range(8, 20), extra=lambda m: 13.0 + 6.5 * m)
    plans = [gamma.plan([offer(length=1) for _ in range(8)], pending_rows=8) for _ in range(40)]
    assert [i for i, p in enumerate(plans, 1) if sum(p.drafts)] == [40]
    stalled = taught(lambda rows: 9.0 + 5.0 * rows, range(8, 20), extra=lambda m: 500.0)  # one stalled sample
    plans = [stalled.plan([offer(length=1) for _ in range(8)], pending_rows=8) for _ in range(96)]
    assert [i for i, p in enumerate(plans, 1) if sum(p.drafts)] == [96], "never more than 4 × probe_every apart"
    alone = taught(cpu_like, range(1, 12), single=True, extra=lambda m: 2.0 * m)  # +2 ms on 12: every 24
    plans = [alone.plan([offer(length=1)], pending_rows=1) for _ in range(24)]
    assert [i for i, p in enumerate(plans, 1) if sum(p.drafts)] == [24]


def test_a_plan_must_clear_the_margin_to_be_taken():
    """A draft kept 54 % of the time (a 2-token match's prior) on a 10 ms step: adding
    5.1 ms it is predicted 1.02× plain, inside the models' error, and not taken; adding
    4.0 ms, 1.10×, and taken. Planted bug: no margin (any gain over 1) drafts in both."""
    def gain_at(extra_ms):
        gamma = taught(lambda rows: 10.0, [1], draft_ms=0.0, extra=lambda m: extra_ms * m, single=True)
        return gamma.plan([offer(length=2, limit=1)], pending_rows=1)
    assert gain_at(5.1).drafts == [0]
    assert gain_at(4.0).drafts == [1] and gain_at(4.0).gain > 1.03


def test_plans_are_held_to_what_they_delivered():
    """Drafting steps whose median time is as measured but every third of which stalls
    (+200 ms: a ragged pass, a neighbour): the medians still promise 3× plain decoding,
    the record of what such steps delivered says otherwise, and drafting stops. Planted
    bug: predictions never scaled by the record keep drafting to the end."""
    gamma = taught(cpu_like, range(1, 12), single=True, draft_ms=0.0)
    drafting = []
    for step in range(60):
        plan = gamma.plan([offer(length=16)], pending_rows=1)
        k = plan.drafts[0]
        stall = 200.0 if k and len(drafting) % 3 == 2 else 0.0
        if k:
            drafting.append(step)
        gamma.observe_batch(1 + k, cpu_like(1) + 2.0 * k + stall, 0.0, False, [(k, k)])
    assert drafting[:3] == [0, 1, 2], "at first the promise is taken"
    assert gamma._record(1, True).factor < 0.5
    assert not any(gamma.plan([offer(length=16)], pending_rows=1).drafts), "a kept record stops it"


def test_what_plain_steps_fall_short_too_is_not_held_against_drafting():
    """The same stalls on every third step, drafting or not: plain decoding falls as short
    of its median-based prediction as drafting does, so drafting that pays 3× keeps
    going. Planted bug: the shortfall not counted against plain steps' own stops it for
    good once the first stalls land."""
    gamma = taught(cpu_like, range(1, 12), single=True, draft_ms=0.0)
    drafting = 0
    for step in range(120):
        plan = gamma.plan([offer(length=16)], pending_rows=1)
        k = plan.drafts[0]
        drafting += k > 0
        gamma.observe_batch(1 + k, cpu_like(1) + 2.0 * k + (200.0 if step % 3 == 2 else 0.0), 0.0, False, [(k, k)])
    assert drafting > 90, drafting


def test_a_bad_stretch_does_not_stop_a_kind_of_plan_for_good():
    """Two chats drafting alike (one pass): a few stalled steps make the record stop such
    plans, and no probe refreshes it (a probe is one sequence's draft, a ragged pass). Once
    STALE_STEPS pass without one, the record is forgotten and the plans come back.
    Planted bug: records kept for good never draft again."""
    from specchat.engine.gamma.batch_plan import STALE_STEPS

    gamma = taught(cpu_like, range(2, 30), single=True, draft_ms=0.0)
    drafted_at = []
    for step in range(STALE_STEPS + 60):
        plan = gamma.plan([offer(length=16), offer(length=16)], pending_rows=2)
        k, rows = plan.drafts, 2 + sum(plan.drafts)
        stall = 300.0 if sum(k) and step < 12 and step % 2 else 0.0
        if all(k):
            drafted_at.append(step)
        gamma.observe_batch(rows, cpu_like(rows) + stall, 0.0, False, [(x, x) for x in k])
    stopped = [s for s in range(12, STALE_STEPS) if s not in drafted_at]
    assert len(stopped) > 100, "the stalls stop one-pass plans"
    assert any(s > STALE_STEPS for s in drafted_at), "and they come back once the record is stale"


# --- one sequence in a batch: its own controller decides -----------------------------------------


def test_a_batch_of_one_chooses_what_adaptive_gamma_chooses_on_replayed_steps():
    """A one-sequence chat's steps (n-gram lookup, γ = auto, on a table model that falls
    into a loop: lookup pays) are replayed, with their recorded times, through a fresh
    AdaptiveGamma and through the batched step's choice for a batch of one with γ = auto's
    batch plan beside it: every γ is the same. (Planted: a plan that decides for a
    sequence alone chooses otherwise.)"""
    import torch

    from specchat.engine.engine import SpeculativeEngine, admit
    from specchat.engine.gamma.controller import AdaptiveGamma, Controller
    from specchat.engine.proposers import NgramProposer
    from specchat.engine.sampling import SamplingParams
    from tests.support.table_lm import TableLM, random_table

    class Logged(AdaptiveGamma):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.log = []

        def choose(self, ids):
            gamma = super().choose(ids)
            self.log.append((list(ids), gamma[0]))
            return gamma

        def observe(self, stats, proposal):
            self.log[-1] += (stats,)
            super().observe(stats, proposal)

    greedy = SamplingParams(temperature=0.0)
    live = Logged(8, NgramProposer("auto", 1, 3, 8))
    engine = SpeculativeEngine(TableLM(random_table(0)), live.proposer, controller=live, eos_token_ids=[])
    list(engine.generate([1, 2, 3], greedy, max_new_tokens=200))
    assert sum(1 for _, gamma, _ in live.log if gamma) >= 10  # it drafted: the choices are worth comparing

    def replay(decide):
        proposer = NgramProposer("auto", 1, 3, 8)
        controller = AdaptiveGamma(8, proposer)
        seq = admit([1, 2, 3], greedy, proposer, controller, torch.device("cpu"), max_new_tokens=10**6,
                    stops=(), eos=(), max_length=10**6)
        planner = BatchGamma(8)
        assert isinstance(planner, Controller)  # one kind of thing chooses γ, for one sequence or many
        gammas = []
        for ids, _, stats in live.log:
            seq.ids = list(ids)
            gamma = decide(seq, planner)
            proposal = proposer.propose(seq.ids, gamma, greedy, None)
            proposer.observe(stats.num_accepted_tokens)
            controller.observe(stats, proposal)
            gammas.append(gamma)
        return gammas

    recorded = [gamma for _, gamma, _ in live.log]
    assert replay(lambda seq, planner: seq.controller.choose(seq.ids)[0]) == recorded
    assert replay(lambda seq, planner: planner.choose([seq]).drafts[0]) == recorded
