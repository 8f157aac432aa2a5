"""``specchat bench`` on tiny real models: files with the right structure, and figures that
agree with each other and with the raw per-request rows. No speed is asserted."""

import json
import shutil
from pathlib import Path

import pytest

from specchat.bench.configs import build_configs, parse_gammas
from specchat.bench.prompt_sets import SHIPPED_SETS, load_prompt_set, load_prompt_sets
from specchat.bench.row import BenchRow
from specchat.bench.stats import per_token_latencies, queue_latencies, telemetry_of
from specchat.cli import main
from specchat.events import StepStats


@pytest.fixture(scope="module")
def bench_run(tiny_profile_path, tmp_path_factory):
    """One tiny benchmark through the CLI: two sets, fixed and auto γ, draft + ngram, the peer
    rows, concurrency 2."""
    out = tmp_path_factory.mktemp("bench") / "out"
    code = main(["bench", "--profile", str(tiny_profile_path), "--prompts", "repetitive", "unusual",
                 "--gamma", "auto,2", "--methods", "draft,ngram,none", "--repeat", "1", "--max-new-tokens", "6",
                 "--concurrency", "2", "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "results.json").read_text())


def test_outputs_exist_with_structure(bench_run):
    out, results = bench_run
    assert (out / "report.md").read_text().startswith("# specchat bench")
    assert (out / "speedup_vs_gamma.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    names = [c["name"] for c in results["configs"]]
    assert names == ["none", "draft_model γ=auto", "draft_model γ=2", "ngram γ=auto", "ngram γ=2", "peer:none",
                     "peer:draft_model γ=auto", "peer:draft_model γ=2", "peer:ngram γ=auto", "peer:ngram γ=2"]
    # every configuration is compared with the peer engine's plain generation
    assert set(results["aggregates"]["vs_peers"]["all"]["ngram γ=2"]) == {"peer:none"}
    assert results["aggregates"]["sets"]["all"]["none"]["overhead_ms"] > 0
    assert set(results["aggregates"]["sets"]) == {"repetitive", "unusual", "all"}
    requests = len(results["requests"])
    assert requests == 5 + 5
    assert len(results["rows"]) == requests * len(names)
    for key in ("torch", "transformers", "device", "profile"):
        assert results["environment"][key]
    assert results["environment"]["models"]["target"]["dtype_reason"] == "set in the profile"
    report = (out / "report.md").read_text()
    assert "Precision: target and draft float32 — set in the profile." in report
    for heading in ("## set `repetitive`", "## set `unusual`", "## all sets (mixed total)", "FIFO queue"):
        assert heading in report


def test_order_is_request_major_and_rotated(bench_run):
    _, results = bench_run
    rows = results["rows"]
    n = len(results["configs"])
    first = [r["config"] for r in rows[:n]]
    second = [r["config"] for r in rows[n:2 * n]]
    assert sorted(first) == sorted(second) and second == first[1:] + first[:1]
    assert len({(r["prompt_id"], r["repeat"]) for r in rows[:n]}) == 1
    for block in range(0, len(rows), n):  # one seed per request, shared by every configuration
        assert len({r["seed"] for r in rows[block:block + n]}) == 1


def test_figures_are_consistent_with_the_rows(bench_run):
    _, results = bench_run
    rows = results["rows"]
    for set_name, configs in results["aggregates"]["sets"].items():
        set_rows = [r for r in rows if set_name == "all" or r["set"] == set_name]
        none = configs["none"]
        for name, figures in configs.items():
            mine = [r for r in set_rows if r["config"] == name]
            tokens, wall = sum(r["new_tokens"] for r in mine), sum(r["wall_ms"] for r in mine)
            assert figures["tokens"] == tokens and figures["requests"] == len(mine)
            assert figures["tokens_per_s"] == pytest.approx(tokens / wall * 1000)
            assert figures["speedup"] == pytest.approx(figures["tokens_per_s"] / none["tokens_per_s"])
            lo, hi = figures["speedup_ci"]
            assert lo <= hi
            assert figures["ttft_ms"] == pytest.approx(sum(r["emissions"][0][0] for r in mine) / len(mine))
            if figures.get("num_drafts"):
                drafts = sum(1 for r in mine for s in r["steps"] if s["num_draft_tokens"])
                accepted = sum(s["num_accepted_tokens"] for r in mine for s in r["steps"])
                drafted = sum(s["num_draft_tokens"] for r in mine for s in r["steps"])
                assert figures["num_drafts"] == drafts
                assert sum(figures["acceptance_histogram"]) == drafts
                assert figures["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
                assert figures["draft_acceptance_rate"] == pytest.approx(accepted / drafted)
        assert none["speedup"] == pytest.approx(1.0)
    for row in rows:  # the emissions account for every emitted token
        assert sum(m for _, m in row["emissions"]) == row["new_tokens"] == len(row["output_ids"])


def test_auto_is_compared_with_the_best_fixed_gamma(bench_run):
    out, results = bench_run
    rows = results["rows"]
    for set_name, methods in results["aggregates"]["auto_vs_best"].items():
        assert set(methods) == {"draft_model", "ngram"}
        for method, compared in methods.items():
            assert compared["best_fixed"] == f"{method} γ=2"  # the only fixed γ of this run
            mine = [r for r in rows if set_name == "all" or r["set"] == set_name]
            auto = [r for r in mine if r["config"] == f"{method} γ=auto"]
            fixed = [r for r in mine if r["config"] == f"{method} γ=2"]
            rate = lambda rs: sum(r["new_tokens"] for r in rs) / sum(r["wall_ms"] for r in rs)  # noqa: E731
            assert compared["ratio"] == pytest.approx(rate(auto) / rate(fixed))
            assert compared["requests"] == len(auto) and compared["ci"][0] <= compared["ci"][1]
    assert "ngram γ=auto vs the best fixed γ on these requests (ngram γ=2" in (out / "report.md").read_text()


def test_exactness_shows_in_the_benchmark(bench_run):
    """The tiny profile is greedy: with or without speculation, ours or transformers',
    every configuration emits the same tokens for a request."""
    out, results = bench_run
    by_request = {}
    for row in results["rows"]:
        by_request.setdefault((row["set"], row["prompt_id"], row["repeat"]), set()).add(tuple(row["output_ids"]))
    assert all(len(outputs) == 1 for outputs in by_request.values())
    # ... and the figures say so
    for configs in results["aggregates"]["sets"].values():
        for figures in configs.values():
            assert figures["same_tokens_as_none"] == figures["paired_requests"] == figures["requests"]
    assert "Replies identical to `none`'s (same seed): draft_model γ=auto 10/10" in (out / "report.md").read_text()


def test_draft_memory_is_reported(bench_run):
    _, results = bench_run
    figures = results["aggregates"]["sets"]["all"]
    assert figures["draft_model γ=2"]["draft_param_bytes"] > 0 and figures["draft_model γ=2"]["draft_kv_bytes_max"] > 0
    assert figures["ngram γ=2"]["draft_param_bytes"] == 0


def test_latency_and_queue_definitions():
    assert per_token_latencies([[10.0, 1], [16.0, 3], [20.0, 1]]) == [2.0, 2.0, 2.0, 4.0]
    assert queue_latencies([5.0, 7.0, 1.0], 2) == [5.0, 12.0, 1.0]
    assert queue_latencies([5.0, 7.0], 1) == [5.0, 7.0]
    steps = [StepStats(num_speculative_tokens=2, num_draft_tokens=2, num_accepted_tokens=n) for n in (0, 2, 1)]
    snapshot = telemetry_of([BenchRow(steps=steps)])
    assert snapshot.acceptance_histogram[:3] == (1, 1, 1) and snapshot.mean_acceptance_length == 2.0


def test_prompt_sets_ship_and_parse(tmp_path):
    for name in SHIPPED_SETS:
        prompt_set = load_prompt_set(name)
        assert 4 <= len(prompt_set.prompts) <= 6
    assert load_prompt_set("long").max_new_tokens >= 1000
    custom = tmp_path / "mine.jsonl"
    custom.write_text('{"id": "a", "prompt": "hi"}\n\n{"text": "there"}\n')
    assert [p.text for p in load_prompt_sets([str(custom)])[0].prompts] == ["hi", "there"]
    assert [s.name for s in load_prompt_sets(["all"])] == list(SHIPPED_SETS)


def test_a_prompt_files_names_are_inert(tmp_path):
    """bench prints a set's name and each prompt's id (progress, table, report.md): from a
    file of someone else's, they come cleaned of what a terminal would act on."""
    from tests.support.crafted import assert_inert, evil, shown

    toml = tmp_path / f"set{evil('file')}.toml"
    # a JSON string literal is a TOML basic string: the attack, escaped as \uXXXX
    toml.write_text(f'description = {json.dumps(evil("about"))}\n[[prompts]]\nid = {json.dumps(evil("toml-id"))}\n'
                    'text = "hi"\n')
    jsonl = tmp_path / "lines.jsonl"
    jsonl.write_text(json.dumps({"id": evil("jsonl-id"), "prompt": "hi"}) + "\n")
    first, second = load_prompt_sets([str(toml), str(jsonl)])
    for shown_text, tag in ((first.name, "file"), (first.description, "about"), (first.prompts[0].id, "toml-id"),
                            (second.prompts[0].id, "jsonl-id")):
        assert_inert(shown_text, where=tag)
        assert shown(tag) in shown_text


BAD_PROMPT_FILES = {  # deep.*: nested past the parser's recursion limit (a RecursionError, not a decode error)
    "syntax.toml": ("[[prompts]\n", "cannot read prompt set: Expected ']]'"),
    "deep.toml": ("x = " + "[" * 500 + "]" * 500 + "\n", "cannot read prompt set: TOML nested too deeply"),
    "syntax.jsonl": ('{"prompt": "hi"}\n{oops\n', "line 2 is not JSON: Expecting property name"),
    "deep.jsonl": ('{"prompt": "hi"}\n' + "[" * 100_000 + "]" * 100_000, "line 2 is not JSON: nested too deeply"),
    "empty.jsonl": ('{"prompt": "hi"}\n{"prompt": " "}\n', "line 2's prompt is empty"),
    "latin-1.jsonl": (b'{"prompt": "caf\xe9"}\n', "cannot read prompt set: byte 15 is not UTF-8"),
    "latin-1.toml": (b'[[prompts]]\ntext = "caf\xe9"\n', "cannot read prompt set: byte 23 is not UTF-8"),
}


@pytest.mark.parametrize("name", BAD_PROMPT_FILES)
def test_a_bad_prompt_file_is_one_line_naming_it(tmp_path, name):
    from specchat.errors import SpecchatError

    text, reason = BAD_PROMPT_FILES[name]
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    with pytest.raises(SpecchatError) as error:
        load_prompt_set(str(path))
    assert "\n" not in str(error.value) and str(error.value).startswith(f"{path}: {reason}")


def test_a_bad_out_is_one_line_before_the_run_and_a_failed_write_keeps_the_results(tmp_path):
    from specchat.bench.configs import check_out_dir
    from specchat.bench.report import write_files
    from specchat.errors import SpecchatError

    a_file = tmp_path / "results.toml"
    a_file.write_text("")
    for out in (a_file, a_file / "sub"):
        with pytest.raises(SpecchatError, match="is a file, not a folder") as error:
            check_out_dir(out)
        assert "\n" not in str(error.value)
    check_out_dir(tmp_path / "new" / "deeper")  # to be made: fine, and nothing made yet
    assert not (tmp_path / "new").exists()
    with pytest.raises(SpecchatError, match="cannot write the results to") as error:
        write_files(a_file / "sub", {"ran": True}, "# report", "plot.png", lambda plt, results: plt.figure())
    kept = Path(str(error.value).split("; they are in ")[1].split()[0])
    assert json.loads((kept / "results.json").read_text()) == {"ran": True}
    assert (kept / "report.md").read_text() == "# report"
    shutil.rmtree(kept)


def test_bench_checks_out_before_loading_anything_and_a_write_with_nowhere_to_go_is_one_line(tmp_path, monkeypatch):
    import tempfile

    from specchat.bench.configs import written
    from specchat.errors import SpecchatError
    from tests.support.cli import assert_one_line_error, in_process

    a_file = tmp_path / "results.toml"
    a_file.write_text("")
    assert_one_line_error(in_process("bench", "--out", str(a_file), "--prompts", "repetitive", "--no-peer"),
                          "--out", "is a file, not a folder")
    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix: str(a_file / "tmp"))  # no temporary folder either

    def write(folder):
        (folder / "results.json").write_text("{}")

    with pytest.raises(SpecchatError, match="nor to a temporary folder") as error:
        written(a_file / "out", write)
    assert "\n" not in str(error.value)


def test_config_parsing_and_draftless_profiles():
    assert parse_gammas("auto,1,3,3") == ["auto", 1, 3]
    notes = []
    configs = build_configs(["draft_model", "ngram"], [2], has_draft=False, peer=False, note=notes.append)
    assert [c.name for c in configs] == ["none", "ngram γ=2"] and "no draft model" in notes[0]


@pytest.mark.parametrize("argv, fragment", [
    (["--gamma", "0"], "--gamma value '0'"),
    (["--methods", "ngram,none", "--suffix-store"], "--suffix-store adds rows to suffix"),
    (["--methods", "suffix", "--suffix-store", "--concurrency", "2"], "--suffix-store adds rows to suffix"),
    (["--methods", "draft,magic"], "--methods value 'magic'"),
    (["--prompts", "nosuchset"], "neither a shipped set nor a file"),
    (["--repeat", "0"], "--repeat must be"),
])
def test_bad_arguments_exit_2(tiny_ngram_profile_path, capsys, argv, fragment):
    assert main(["bench", "--profile", str(tiny_ngram_profile_path), *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_ngram_profile_skips_draft_and_runs(tiny_ngram_profile_path, tmp_path, capsys):
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"prompt": "say hello hello hello"}\n')
    code = main(["bench", "--profile", str(tiny_ngram_profile_path), "--prompts", str(prompts), "--gamma", "3",
                 "--max-new-tokens", "4", "--no-peer", "--no-warmup", "--out", str(tmp_path / "o")])
    assert code == 0
    captured = capsys.readouterr()
    assert "skipping method 'draft_model'" in captured.err and "results:" in captured.err
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    # every model-free method of the table runs by default
    assert [c["name"] for c in results["configs"]] == ["none", "ngram γ=3", "suffix γ=3"]


def test_a_suffix_row_with_the_runs_store_drafts_a_question_asked_again_from_its_first_answer(
        tiny_ngram_profile_path, tmp_path):
    """--suffix-store: the cross-chat workload. At T = 0 a prompt's second repeat replies
    as its first did, so the +store row drafts it from the first reply, where the plain
    suffix row has only the prompt to copy from; its first repeat has nothing stored yet.
    (Planted: a store that is never added to fails it.)"""
    profile = tmp_path / "t0.toml"
    profile.write_text(f'extends = "{tiny_ngram_profile_path}"\n[sampling]\ntemperature = 0.0\n')
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"prompt": "a b c d e f g"}\n')
    assert main(["bench", "--profile", str(profile), "--prompts", str(prompts), "--methods", "suffix,none",
                 "--gamma", "4", "--suffix-store", "--repeat", "2", "--max-new-tokens", "24", "--no-peer",
                 "--no-warmup", "--out", str(tmp_path / "o")]) == 0
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [c["name"] for c in results["configs"]] == ["none", "suffix γ=4", "suffix γ=4 +store"]

    def kept(config, repeat):
        row, = [r for r in results["rows"] if r["config"] == config and r["repeat"] == repeat]
        return sum(s["num_accepted_tokens"] for s in row["steps"]), row["output_ids"]

    (first, reply0), (again, reply1) = kept("suffix γ=4 +store", 0), kept("suffix γ=4 +store", 1)
    assert reply0 == reply1 == kept("none", 1)[1]  # greedy: the same reply, exact whatever drafted it
    assert first == kept("suffix γ=4", 0)[0]  # nothing stored before the first chat
    assert again >= kept("suffix γ=4", 1)[0] + len(reply1) // 2  # most of the second drafted from the first


def test_a_run_stopped_by_sigterm_keeps_its_finished_requests_whole(tiny_ngram_profile_path, tmp_path, monkeypatch,
                                                                    capsys):
    """SIGTERM (or Ctrl-C) in the middle of a request: results.json and report.md are still
    written, with the requests that ran under every configuration and none of the one cut
    off, and both say the run stopped early. (Planted: keeping the cut request's rows, or
    letting SIGTERM kill the process, fails it.)"""
    import os
    import signal

    from specchat.commands import bench as bench_command

    def with_progress(console, work):
        def progress(done, total, text):
            if done == 5:  # the second request's third configuration of three: mid-request
                os.kill(os.getpid(), signal.SIGTERM)
        return work(progress)

    monkeypatch.setattr(bench_command, "_with_progress", with_progress)
    prompts = tmp_path / "three.jsonl"
    prompts.write_text("".join(f'{{"prompt": "say {w} {w} {w}"}}\n' for w in ("hi", "yes", "no")))
    assert main(["bench", "--profile", str(tiny_ngram_profile_path), "--prompts", str(prompts), "--gamma", "3",
                 "--max-new-tokens", "4", "--no-peer", "--no-warmup", "--out", str(tmp_path / "o")]) == 0
    assert "Stopped early: 1 of 3 requests" in capsys.readouterr().err
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert results["stopped_early"] == {"requests_done": 1, "requests": 3}
    assert len(results["rows"]) == 3 and {r["prompt_id"] for r in results["rows"]} == {results["rows"][0]["prompt_id"]}
    assert "Stopped early: 1 of 3 requests" in (tmp_path / "o" / "report.md").read_text()
    assert signal.getsignal(signal.SIGTERM) is not signal.default_int_handler  # put back after the run


def test_a_run_stopped_before_any_request_finished_says_interrupted_and_writes_nothing(
        tiny_ngram_profile_path, tmp_path, monkeypatch, capsys):
    import os
    import signal

    from specchat.commands import bench as bench_command

    def with_progress(console, work):
        return work(lambda done, total, text: done == 1 and os.kill(os.getpid(), signal.SIGTERM))

    monkeypatch.setattr(bench_command, "_with_progress", with_progress)
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"prompt": "say hi hi hi"}\n')
    assert main(["bench", "--profile", str(tiny_ngram_profile_path), "--prompts", str(prompts), "--gamma", "3",
                 "--max-new-tokens", "4", "--no-peer", "--no-warmup", "--out", str(tmp_path / "o")]) == 130
    assert "interrupted" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_the_default_is_the_profiles_method_at_its_gamma_against_plain_and_one_peer(tiny_ngram_profile_path,
                                                                                    tmp_path, monkeypatch, capsys):
    """No --grid, --gamma or --methods: three rows, not every method × γ (26 configurations
    and hours on a CPU for the default profile), and a line saying what runs before the
    models load. (Planted: the grid as the default, or the first line after the load,
    fails it.)"""
    import specchat.loading as loading

    real_load = loading.load_models
    before_load = []
    monkeypatch.setattr(loading, "load_models", lambda *a, **k: before_load.append(capsys.readouterr().err)
                        or real_load(*a, **k))
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"prompt": "say hello hello hello"}\n')
    assert main(["bench", "--profile", str(tiny_ngram_profile_path), "--prompts", str(prompts),
                 "--max-new-tokens", "4", "--no-warmup", "--out", str(tmp_path / "o")]) == 0
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [c["name"] for c in results["configs"]] == ["none", "ngram γ=3", "peer:none"]
    assert "ngram γ=3 against plain decoding and one peer row" in before_load[0]


def test_the_default_rows_take_auto_where_the_method_picks_its_own_gamma_and_keep_the_store_row():
    from specchat.bench.configs import default_configs

    assert [c.name for c in default_configs("ngram_draft", 4, peer=False)] == ["none", "ngram_draft γ=auto"]
    assert [c.name for c in default_configs("suffix", 2, peer=True, suffix_store=True)] == [
        "none", "suffix γ=2", "suffix γ=2 +store", "peer:none"]


def test_a_log_file_shows_the_run_under_way_at_once_then_a_line_a_minute(monkeypatch):
    """Not on a terminal: each warm-up and the first timed run print as they start; later
    runs only once a minute. (Planted: the old once-a-minute-only log prints nothing here.)"""
    import io

    from rich.console import Console

    from specchat.commands import bench as bench_command

    log = io.StringIO()

    def work(progress):
        progress(0, 0, "warm-up ngram γ=3")
        progress(0, 6, "open/1 #0 · none")
        progress(1, 6, "open/1 #0 · ngram γ=3")
        return "done"

    assert bench_command._with_progress(Console(file=log, force_terminal=False), work) == "done"
    assert log.getvalue().splitlines() == ["bench: warm-up ngram γ=3", "bench: 0/6 runs, open/1 #0 · none"]
