"""Pure parts of the UI: theme files, panel wording, token styling, the event pump."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from specchat.events import Token
from specchat.telemetry import MetricsSnapshot
from specchat.ui.figures import breakeven_text, figure_rows, histogram_lines, recommended_gamma_text
from specchat.ui.pump import EventPump, EventsReady
from specchat.ui.themes import load_themes, theme_from_toml
from specchat.ui.widgets.provenance_text import KIND_STYLES, NO_COLOUR_STYLES, kind_styles, provenance_content
from tests.support import ROOT


@pytest.mark.parametrize(
    "text, reason",
    [
        ('name = "x"\nprimary = "#zzzzzz"\n', "key 'primary' = '#zzzzzz' is not a colour"),
        ('name = "x"\nprimray = "#112233"\n', "did you mean 'primary'?"),
        ('name = "x"\n', "key 'primary' is missing"),
        ('name = "x"\nprimary = "#112233"\ndark = "yes"\n', "key 'dark' must be bool"),
        ('name = "x"\nprimary = "#112233"\n[variables]\nspec-bonus = 3\n', "variables.spec-bonus"),
        ("primary = [", "not valid TOML"),
        ("primary = " + "[" * 500 + "]" * 500, "not valid TOML (nested too deeply)"),  # tomllib's RecursionError
    ],
)
def test_bad_theme_files_name_the_key(tmp_path, text, reason):
    path = tmp_path / "t.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=None) as info:
        theme_from_toml(path)
    assert reason in str(info.value)


def test_load_themes_skips_bad_and_later_dirs_override(tmp_path):
    shipped, user = tmp_path / "shipped", tmp_path / "user"
    shipped.mkdir()
    user.mkdir()
    (shipped / "a.toml").write_text('name = "a"\nprimary = "#111111"\n', encoding="utf-8")
    (shipped / "bad.toml").write_text('name = "bad"\n', encoding="utf-8")
    (user / "a.toml").write_text('name = "a"\nprimary = "#222222"\n[variables]\nspec-accepted = "#00ff00"\n',
                                 encoding="utf-8")
    loaded, failed = load_themes([shipped, user, tmp_path / "missing"])
    assert [t.name for t in loaded] == ["a"]
    assert loaded[0].primary == "#222222"
    assert loaded[0].variables["spec-accepted"] == "#00ff00"
    assert loaded[0].variables["spec-bonus"]  # defaults fill what a theme leaves out
    assert len(failed) == 1 and "bad.toml" in str(failed[0]) and "primary" in str(failed[0])


def test_shipped_themes_all_load():
    loaded, failed = load_themes(ROOT / "themes")
    assert not failed
    names = {t.name for t in loaded}
    assert {"specchat-dark", "specchat-light", "specchat-high-contrast"} <= names
    for theme in loaded:
        assert {"spec-accepted", "spec-resampled", "spec-bonus", "spec-target"} <= set(theme.variables)


@pytest.mark.parametrize(
    "snap, method, words, level",
    [
        (MetricsSnapshot(num_drafts=5, alpha=0.8, cost_ratio=0.1, breakeven=True, verdict="pays", best_gamma=3,
                         recommended_gain=1.4),
         "draft_model", "speculation pays: γ 3 predicted 1.40× plain speed", "good"),
        (MetricsSnapshot(num_drafts=5, alpha=0.1, cost_ratio=0.3, breakeven=False, verdict="does not pay",
                         best_gamma=0, recommended_gain=0.7),
         "draft_model", "does not pay: predicted 0.70× plain speed at best; switch to n-gram", "bad"),
        (MetricsSnapshot(num_drafts=5, verdict="does not pay", best_gamma=0, recommended_gain=0.9), "ngram",
         "turn speculation off", "bad"),
        # the paper's test passes, the cost model's does not: the verdict is the cost model's
        (MetricsSnapshot(num_drafts=5, alpha=0.5, cost_ratio=0.3, breakeven=True, verdict="does not pay",
                         best_gamma=0, recommended_gain=0.9),
         "draft_model", "does not pay", "bad"),
        (MetricsSnapshot(num_drafts=5, verdict="pays", best_gamma="auto", recommended_gain=1.2), "ngram",
         "speculation pays: γ auto predicted 1.20×", "good"),
        (MetricsSnapshot(num_drafts=5, alpha=0.5), "draft_model", "too early to say", "unknown"),
        (MetricsSnapshot(), "ngram", "too early to say: no drafts yet", "unknown"),
        (MetricsSnapshot(), "none", "no speculation", "unknown"),
    ],
)
def test_breakeven_in_plain_words(snap, method, words, level):
    text, got = breakeven_text(snap, method)
    assert words in text and got == level


def test_breakeven_and_gamma_hidden_without_timings():
    snap = MetricsSnapshot(num_drafts=5, alpha=0.8, cost_ratio=0.1, breakeven=True, best_gamma=4, verdict="pays",
                           recommended_gain=1.25)
    assert breakeven_text(snap, hide_timing=True)[1] == "unknown"
    assert recommended_gamma_text(snap) == "recommended γ: 4 (predicted 1.25×)"
    assert recommended_gamma_text(snap, hide_timing=True) == "recommended γ: –"
    assert recommended_gamma_text(MetricsSnapshot(best_gamma=0, recommended_gain=0.8)).startswith("recommended γ: 0")


def test_a_withheld_measured_speedup_says_why_instead_of_a_bare_dash():
    noisy = MetricsSnapshot(measured_speedup_note="cannot tell: 1.70× is above the 1.03 tokens a step allow — timing noise")
    rows = {r.label: r for r in figure_rows(noisy, MetricsSnapshot(measured_speedup=1.5))}
    assert (rows["measured speed-up"].turn, rows["measured speed-up"].session) == ("–*", "1.50×")
    assert "* " + noisy.measured_speedup_note in rows
    hidden = [r.label for r in figure_rows(noisy, noisy, hide_timing=True)]
    assert not any(label.startswith("*") for label in hidden)  # deterministic mode shows no timings


def busy(share: float, ratio: float, interval: tuple[float, float]) -> MetricsSnapshot:
    return MetricsSnapshot(measured_speedup_busy=ratio, measured_speedup_interval=interval, busy_machine=True,
                           cpu_others=share, measured_speedup_note=f"busy machine: other processes used {share:.0%} "
                                                                   "of the CPU, timings unreliable")


def test_a_busy_machine_shows_the_ratio_with_its_interval_and_the_caveat_once():
    """Issue 59, newcomer item 3: on a busy machine the panel showed "–*" in both columns
    and the footnote twice (each column's share of the CPU differed by a point)."""
    turn, session = busy(0.63, 1.31, (1.05, 1.63)), busy(0.58, 1.27, (1.12, 1.44))
    rows = figure_rows(turn, session)
    by_label = {r.label: r for r in rows}
    assert (by_label["measured speed-up"].turn, by_label["measured speed-up"].session) == ("1.31×*", "1.27×*")
    assert "  turn 95 %: 1.05–1.63×" in by_label and "  session 95 %: 1.12–1.44×" in by_label
    caveats = [r.label for r in rows if r.label.startswith("*")]
    assert caveats == ["* busy machine: other processes used 63% of the CPU, so the speed-up is rough"]
    # a recording made before the busy ratio was kept: the dash and its reason, once
    old = [r.label for r in figure_rows(MetricsSnapshot(measured_speedup_note=turn.measured_speedup_note),
                                        MetricsSnapshot(measured_speedup_note=turn.measured_speedup_note))]
    assert sum(label.startswith("* busy machine") for label in old) == 1


def test_the_telemetry_keeps_a_busy_machines_ratio_beside_the_withheld_figure():
    from specchat.contention import BUSY_SHARE
    from specchat.speedup import StepSums, measured_speedup

    steps = StepSums()
    for ms in (15.0, 16.0, 14.0, 15.5, 15.2):
        steps.add(2, ms)
    quiet = measured_speedup(steps, [10.0, 10.4, 9.8], others=0.0)
    loud = measured_speedup(steps, [10.0, 10.4, 9.8], others=BUSY_SHARE + 0.2)
    assert loud.value is None and loud.busy_value == pytest.approx(quiet.value) and loud.interval == quiet.interval
    assert quiet.busy_value is None


@pytest.mark.parametrize(
    "snap, gamma, words, level",
    [
        # issue 59, newcomer item 1: "pays … 1.59×" stood over "γ now: 0": the verdict says what auto does
        (MetricsSnapshot(num_drafts=5, verdict="pays", best_gamma="auto", recommended_gain=1.59,
                         gamma_history=(3, 2, 0, 0, 0, 0, 0, 0, 0, 0), last_gamma=0), "auto",
         "speculation pays: γ auto predicted 1.59× plain speed; for now γ auto decodes plainly", "good"),
        (MetricsSnapshot(num_drafts=5, verdict="pays", best_gamma="auto", recommended_gain=1.59,
                         gamma_history=(0, 0, 3, 0), last_gamma=0), "auto",
         "speculation pays: γ auto predicted 1.59× plain speed", "good"),
        (MetricsSnapshot(num_drafts=5, verdict="pays", best_gamma=3, recommended_gain=1.4, gamma_history=(5,)), 5,
         "speculation pays: γ 3 predicted 1.40× plain speed; you run γ 5", "good"),
        (MetricsSnapshot(num_drafts=5, verdict="does not pay", best_gamma=0, recommended_gain=0.8,
                         gamma_history=(0, 0)), "auto", "does not pay: predicted 0.80× plain speed at best; γ auto "
                                                        "decodes plainly, probing now and then", "bad"),
    ],
)
def test_the_verdict_agrees_with_what_gamma_auto_is_doing(snap, gamma, words, level):
    text, got = breakeven_text(snap, "draft_model", gamma=gamma)
    assert text.startswith(words) and got == level
    if gamma == "auto" and snap.gamma_history[-8:] and any(snap.gamma_history[-8:]):
        assert "decodes plainly" not in text  # drafting lately: no "plain for now"


def test_the_panel_key_explains_every_row():
    from specchat.ui.figures import DETAILS, SPEEDUP, SUMMARY
    from specchat.ui.glossary import PANEL_KEY, panel_key_lines

    explained = {label for label, _ in PANEL_KEY}
    assert {label for label, *_ in SUMMARY + DETAILS} | {SPEEDUP} <= explained
    assert max(len(line) for line in panel_key_lines()) <= 72  # the help box's width


def test_histogram_shows_every_bin_up_to_gamma():
    lines = histogram_lines((2, 0, 4, 0, 0, 0, 0, 0, 0), gamma=3)
    assert [line.split()[0] for line in lines] == ["0", "1", "2", "3"]
    assert lines[2].rstrip().endswith("4") and "█" * 16 in lines[2]
    assert histogram_lines((0, 0, 0)) == []


def test_provenance_runs_share_spans_in_colour_alone_and_markers_only_without_colour():
    tokens = [Token(1, "accepted", text="a"), Token(2, "accepted", text="b"), Token(3, "resampled", text="c"),
              Token(4, "bonus", text="d"), Token(5, "target", text="e")]
    content = provenance_content(tokens)
    assert content.plain == "abcde"
    assert [(s.start, s.end, s.style) for s in content.spans] == [
        (0, 2, "$spec-accepted"), (2, 3, "$spec-resampled"), (3, 4, "$spec-bonus"), (4, 5, "$spec-target")]
    # with colour, colour is the only cue: no attribute starts and stops mid-word
    assert not any(word in style for style in KIND_STYLES.values() for word in ("bold", "underline", "italic"))
    # without colour, each kind but the common one carries a text attribute
    plain = provenance_content(tokens, styles=NO_COLOUR_STYLES)
    assert [s.style for s in plain.spans] == [
        "$spec-accepted", "$spec-resampled underline", "$spec-bonus bold", "$spec-target italic"]
    assert kind_styles(SimpleNamespace(no_color=True)) is NO_COLOUR_STYLES
    assert kind_styles(SimpleNamespace(no_color=False)) is KIND_STYLES
    highlighted = provenance_content(tokens, highlight=2, clickable=True)
    assert any("reverse" in s.style and "@click=screen.select(2)" in s.style for s in highlighted.spans)


class _Sink:
    def __init__(self):
        self.messages = []

    def post_message(self, message):
        self.messages.append(message)
        return True


def test_pump_never_drops_events_and_coalesces_wakeups():
    sink = _Sink()
    pump = EventPump(sink)  # type: ignore[arg-type]
    threads = [threading.Thread(target=lambda base=b: [pump.put(base + i) for i in range(1000)]) for b in (0, 10000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [event for _, event in pump.drain()]
    assert sorted(got) == list(range(1000)) + list(range(10000, 11000))
    assert len(sink.messages) == 1, "one wake-up while nothing was drained"
    pump.put("next")
    assert len(sink.messages) == 2 and [e for _, e in pump.drain()] == ["next"]
    assert EventsReady().can_replace(EventsReady())


def test_a_marker_wakes_the_ui_even_while_a_wakeup_is_pending_and_makes_the_drain_urgent():
    sink = _Sink()
    pump = EventPump(sink)  # type: ignore[arg-type]
    pump.put("token")
    assert len(sink.messages) == 1 and not pump.urgent
    pump.put_marker("turn ended")
    assert len(sink.messages) == 2 and pump.urgent, "the end of a turn must not wait for the drain interval"
    assert [e for _, e in pump.drain()] == ["token", "turn ended"] and not pump.urgent


def test_the_panel_counts_drafts_per_proposer_only_for_a_hybrid():
    from specchat.ui.figures import source_lines

    assert source_lines({"ngram": {"drafted": 9, "accepted": 3, "draft_ms_per_token": 0.0}}) == []
    lines = source_lines({"ngram": {"drafted": 40, "accepted": 30, "draft_ms_per_token": 0.01},
                          "eagle3": {"drafted": 24, "accepted": 5, "draft_ms_per_token": 2.4},
                          "\x1b]0;evil\x07": {"drafted": 1, "accepted": 0, "draft_ms_per_token": None}})
    assert lines[0] == "by proposer (kept/drafted):"
    assert any(line.startswith("head") and "5/24" in line and "2.4 ms/draft" in line for line in lines)
    assert max(len(line) for line in lines) <= 34  # the panel's width
    assert not any("\x1b" in line or "evil" in line for line in lines)  # a recording's names are not echoed


def test_a_shown_measured_speedup_comes_with_its_interval():
    from specchat.telemetry import MetricsSnapshot
    from specchat.ui.figures import figure_rows

    shown = MetricsSnapshot(measured_speedup=1.1, measured_speedup_interval=(0.97, 1.24))
    labels = [r.label for r in figure_rows(shown, MetricsSnapshot())]
    assert "  turn 95 %: 0.97–1.24×" in labels
    assert not any("session 95 %" in label for label in labels)  # nothing shown there, no interval
    assert not any("95 %" in r.label for r in figure_rows(shown, shown, hide_timing=True))
    assert [r.label for r in figure_rows(shown, shown) if "95 %" in r.label] == ["  95 %: 0.97–1.24×"]
