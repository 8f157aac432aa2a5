"""γ = auto and a draft source that could not pay even if every draft were kept (the real
pair on two CPU cores: a 0.5B draft costs about a 1.5B target step, and verifying k
drafts costs nearly k steps). It must stop drafting from it, not keep probing because
the probes' drafts are kept (issue 56: 0.83× plain, since each kept probe called the next
at once), and look again only once the context has outgrown the one it judged at."""

from specchat.engine.gamma.controller import RETEST_GROWTH, RETEST_SPAN, AdaptiveGamma
from specchat.engine.proposers import Proposer
from specchat.events import StepStats

PLAIN_MS = 23.0


class DraftModel(Proposer):
    kind = "draft_model"


def controller_for(kind="draft_model"):
    proposer = DraftModel("auto", 8)
    proposer.kind = kind
    return AdaptiveGamma(8, proposer)


def drive(controller, steps, draft_ms_per_token, verify, start=100):
    """Every draft kept; the context grows by the tokens each step emits."""
    context, chosen = start, []
    for _ in range(steps):
        k, _ = controller.choose(list(range(context)))
        chosen.append(k)
        stats = StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=k,
                          draft_ms=draft_ms_per_token * k, draft_forwards=k, verify_ms=verify(k),
                          total_ms=verify(k) + draft_ms_per_token * k, draft_source=controller.proposer.kind if k else "",
                          context_tokens=context, cpu_others=0.0)
        controller.observe(stats, None)
        context += k + 1
    return chosen


def dear(k):  # the pair's v(k) on two cores, Q4_K_M: 1.8, 2.1, 2.35, … plain steps
    return PLAIN_MS * (1 + 0.8 * k if k < 2 else 1.3 + 0.35 * k)


def test_a_draft_that_cannot_pay_even_when_every_draft_is_kept_stops_being_drafted():
    controller = controller_for()
    chosen = drive(controller, 600, draft_ms_per_token=27.0, verify=dear)
    drafted = [i for i, k in enumerate(chosen) if k]
    # exploring (two sizes) and the draft's second timing, then never: no probe, no catch-up
    assert len(drafted) <= 4 and max(drafted) < 30, f"drafted {len(drafted)} times, at steps {drafted[:20]}"
    assert controller.cannot_pay("draft_model")
    assert not controller.prefills_proposer() or controller.plain_run > 0  # no pass over the next prompt


def test_a_cheap_draft_whose_drafts_are_kept_goes_on_drafting():
    controller = controller_for()
    chosen = drive(controller, 300, draft_ms_per_token=2.0, verify=dear)
    assert sum(k > 0 for k in chosen[50:]) / 250 > 0.9
    assert not controller.cannot_pay("draft_model")


def test_a_source_that_cannot_pay_is_looked_at_again_once_the_context_has_grown():
    controller = controller_for()
    drive(controller, 100, draft_ms_per_token=27.0, verify=dear)
    judged_at = controller.hopeless["draft_model"]
    later = max(RETEST_GROWTH * judged_at, judged_at + RETEST_SPAN) + 10
    controller.model.at(later)
    assert not controller.cannot_pay("draft_model")
    controller.model.at(judged_at + 10)
    assert controller.cannot_pay("draft_model")


def test_a_point_mass_lookup_is_never_condemned_its_probe_costs_one_verification():
    controller = controller_for("ngram")
    drive(controller, 100, draft_ms_per_token=27.0, verify=dear)
    assert not controller.hopeless


def test_a_drafting_steps_fixed_cost_is_priced_as_timed_not_per_draft():
    """A draft model's step has a fixed part (its first forward also runs the last step's
    kept tokens; q is warped) besides one forward per draft: D(k) = 12 + 10k ms here. Priced
    per draft (the median of D(k)/k over k = 1 and 2 steps: 16 ms), k = 1 looked 6 ms
    cheaper than it is, and on the real pair γ = auto drafted k = 1 at 0.86× plain (T = 0.6,
    repetitive). The forecast must use each k's own timing, and the line through them
    between and beyond."""
    from specchat.engine.gamma.cost_model import CostModel

    model = CostModel(8)
    model.at(100)
    verify = {0: 23.0, 1: 26.0, 2: 33.0}
    for k in (0, 2, 2, 2, 1, 1, 0):
        d = 12.0 + 10.0 * k if k else 0.0
        model.time(StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=k, draft_ms=d,
                             draft_forwards=k, verify_ms=verify[k], total_ms=verify[k] + d,
                             draft_source="draft_model" if k else "", context_tokens=100, cpu_others=0.0),
                   "draft_model")
    forecast = model.forecast([1.0] * 3, "draft_model")
    assert [round(f[1], 6) for f in forecast[1:3]] == [22.0 + 26.0, 32.0 + 33.0]
    assert model.drafting_ms("draft_model", 3) == 42.0  # on the line through k = 1 and 2
    assert model.ceiling("draft_model", 2) == max(2 * 23.0 / 48.0, 3 * 23.0 / 65.0)


def test_a_draft_whose_best_case_is_within_ten_percent_of_plain_is_set_aside():
    """The ceiling (every draft kept) leaves out a draft model's catch-ups; the pair on two
    cores timed ceilings of 1.04-1.05 at load, and drafting from it lost (ngram_draft 1.08×
    against 1.34× plain on the mixed sets, T = 0). Below CEILING_TO_DRAFT it is set aside."""
    from specchat.engine.gamma.controller import CEILING_TO_DRAFT

    controller = controller_for()
    # every draft kept, k = 8 at best: 9 tokens for 8 * 18 + 54 ms against 9 plain steps of 23 (1.045)
    drive(controller, 40, draft_ms_per_token=18.0, verify=lambda k: PLAIN_MS * (1 + 0.17 * k))
    best = controller.model.ceiling("draft_model", 8)
    assert best is not None and 1.0 < best < CEILING_TO_DRAFT
    assert controller.cannot_pay("draft_model")


class Behind(Proposer):
    """A draft model that is ``behind`` tokens behind the context whenever it is asked."""

    kind = drafting_model = "draft_model"

    def __init__(self, behind):
        super().__init__("auto", 8)
        self.behind = behind

    def candidates(self, ids, limit):
        from specchat.engine.proposers import Candidate

        return [Candidate(self.kind, limit, behind=self.behind)]


def timed(controller, draft, verify, catch_up=None, context=100):
    """Plain steps, k = 1 and 2 steps as a load-time timing gives them; ``catch_up``: (k,
    tokens, draft ms) of a step that caught up."""
    for k in (0, 0, 0, 2, 2, 2, 1, 1, 0, 0):
        controller.model.time(StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=k,
                                        draft_ms=draft(k) if k else 0.0, draft_forwards=k, verify_ms=verify(k),
                                        total_ms=verify(k) + (draft(k) if k else 0.0), context_tokens=context,
                                        draft_source="draft_model" if k else "", cpu_others=0.0), "draft_model")
    if catch_up:
        k, n, ms = catch_up
        controller.model.time_catch_up(StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=0, draft_ms=ms,
                                                 draft_catch_up_tokens=n, draft_source="draft_model"), "draft_model")


def plain_steps(controller, steps, ms, context=100):
    chosen = []
    for _ in range(steps):
        k, _ = controller.choose(list(range(context)))
        chosen.append(k)
        controller.observe(StepStats(num_speculative_tokens=k, num_draft_tokens=0, num_accepted_tokens=0, verify_ms=ms, total_ms=ms,
                                     context_tokens=context, cpu_others=0.0), None)
        context += 1
    return chosen


def test_a_probe_whose_catch_up_outweighs_what_the_draft_could_win_is_not_run():
    """A draft model probed after a plain stretch first runs every token it missed: on the
    pair a probe after 13 plain steps ran a 90-token catch-up in 365 ms, 13 plain steps'
    worth, for a draft whose best case was +10 % (issue 56: 0.90× plain on that request).
    Here every draft kept would give 1.16× at k = 2, and 90 tokens at 5 ms a token, spread
    over 90 steps, bring that under CEILING_TO_DRAFT: no probe. (Planted: the probe priced
    without the catch-up runs.)"""
    controller = AdaptiveGamma(8, Behind(90))
    timed(controller, draft=lambda k: 10.0 + 10.0 * k, verify=lambda k: 27.0 + 6.5 * k, catch_up=(2, 31, 30 + 31 * 5.0))
    assert 1.1 < controller.model.ceiling("draft_model", 8) < 1.2
    assert not any(plain_steps(controller, 200, 27.0))


def test_a_probe_after_a_short_stretch_still_runs():
    """The same draft, 2 tokens behind: the probe looks again, as before."""
    controller = AdaptiveGamma(8, Behind(2))
    timed(controller, draft=lambda k: 10.0 + 10.0 * k, verify=lambda k: 27.0 + 6.5 * k, catch_up=(2, 31, 30 + 31 * 5.0))
    assert any(plain_steps(controller, 60, 27.0))


def test_warm_plain_steps_set_aside_a_draft_that_only_cold_timings_let_through():
    """The load-time timing's plain steps read 40 % slow (cold); the draft's ceiling looked
    1.37 and it was kept. Warm plain steps at 27 ms replace them, and the ceiling they give
    (0.98) sets it aside before any probe. (Planted: judging only on drafting steps keeps it.)"""
    controller = AdaptiveGamma(8, Behind(0))
    timed(controller, draft=lambda k: 8.0 + 12.0 * k, verify=lambda k: 38.0 if k == 0 else 27.0 + 12.0 * k)
    controller.judge("draft_model")
    assert not controller.cannot_pay("draft_model")
    plain_steps(controller, 12, 27.0)
    assert controller.cannot_pay("draft_model")


def test_the_ceiling_rests_on_the_sizes_timed_not_on_lines_beyond_them():
    """A live k = 1 step's drafting (31 ms: its first forward ran two kept tokens) beside a
    load-time k = 2 one (32 ms: drafts on random ids are rejected, one token) put the line
    through them flat, and k = 8 "could" give 3× where nothing timed gave over 1.1: γ = auto
    kept drafting k = 1 at 0.88× plain on the pair (issue 56). (Planted: the ceiling read
    over every k up to the limit.)"""
    from specchat.engine.gamma.cost_model import CostModel

    model = CostModel(8)
    model.at(100)
    drafting, verify = {0: 0.0, 1: 31.0, 2: 32.0}, {0: 27.0, 1: 34.5, 2: 47.0}
    for k in (0, 1, 2, 1, 2, 0):
        model.time(StepStats(num_speculative_tokens=k, num_draft_tokens=k, num_accepted_tokens=k, draft_ms=drafting[k],
                             draft_forwards=k, verify_ms=verify[k], total_ms=verify[k] + drafting[k],
                             draft_source="draft_model" if k else "", context_tokens=100, cpu_others=0.0), "draft_model")
    assert abs(model.ceiling("draft_model", 8) - max(2 * 27.0 / 65.5, 3 * 27.0 / 79.0)) < 1e-12


def test_a_draft_far_behind_where_drafting_pays_is_probed_again():
    """A draft set aside early in a chat falls further behind with every plain step. With its
    catch-up spread over a fixed number of steps, 2,100 tokens behind priced every k out of
    reach (ceiling 2.2 without the catch-up, 0.5 with it) and the draft was never probed
    again, even once the context had outgrown RETEST. The catch-up is spread over as many
    steps as the tokens it missed (found in review; planted: a fixed horizon)."""
    controller = AdaptiveGamma(8, Behind(2100))
    timed(controller, draft=lambda k: 2.0 + 2.0 * k, verify=lambda k: 27.0 + 3.0 * k, catch_up=(2, 31, 6 + 31 * 5.0),
          context=2300)
    assert controller.model.ceiling("draft_model", 8) > 2
    assert any(plain_steps(controller, 100, 27.0, context=2300))


def test_a_steps_predicted_cost_holds_the_catch_up_its_choice_priced():
    """The StepStats forecast (the panel's and bench's "predicted") is the one γ was chosen by:
    a draft 90 tokens behind costs its catch-up's share there too (found in review; planted:
    the forecast without it reads 5 ms a step cheaper than the choice)."""
    from specchat.engine.proposers import Candidate

    controller = AdaptiveGamma(8, Behind(90))
    timed(controller, draft=lambda k: 10.0 + 10.0 * k, verify=lambda k: 27.0 + 6.5 * k, catch_up=(2, 31, 30 + 31 * 5.0))
    controller._use(Candidate("draft_model", 8, behind=90))
    assert abs(controller.assess(2, "draft_model").predicted_cost - (30.0 + 40.0 + 5.0) / 27.0) < 1e-9
