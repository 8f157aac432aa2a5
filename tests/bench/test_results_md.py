"""scripts/results-md.py, which writes docs/benchmarks/RESULTS.md from `specchat bench` output.

The fixture is a real run (2026-12-01, smollm2-eagle3 on the `open` set, 2 CPU cores; its
report is docs/benchmarks/archive/2026-12-01-cpu-eagle3-open.md) with the raw per-request
rows dropped: the script reads only the aggregates and what describes the run.

One test runs the script as a user does, in a fresh interpreter; the others call its main
here (results_md), the same exit code, stdout and stderr without ~2 s of imports each.
"""

import contextlib
import functools
import importlib.util
import io
import json
import shlex
import subprocess
import sys
import types

from specchat.bench.configs import build_configs, parse_gammas, parse_methods
from specchat.bench.runner import PEER_METHODS
from specchat.cli import build_parser
from tests.support import FIXTURES, ROOT

SCRIPT = ROOT / "scripts" / "results-md.py"
RUN = FIXTURES / "bench" / "2026-12-01-cpu-eagle3-open"
TABLE_HEADER = ("| run | profile | set | config | × llama.cpp plain [95% CI] | × our plain [95% CI] "
                "| mean acc. len | accept rate | tok/s |")


def results_md_as_run(*runs, out="-"):
    """The script in a fresh interpreter, as `python scripts/results-md.py` runs it."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, runs), "-o", str(out)],
                          capture_output=True, text=True, timeout=60)


@functools.cache
def _script():
    spec = importlib.util.spec_from_file_location("results_md_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results_md(*runs, out="-"):
    """The script's main in this process (a fresh interpreter costs ~2 s of imports): its
    exit code, stdout and stderr, as results_md_as_run gives them."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = _script().main([*map(str, runs), "-o", str(out)])
    return types.SimpleNamespace(returncode=code, stdout=stdout.getvalue(), stderr=stderr.getvalue())


def table_rows(text):
    return [line for line in text.splitlines() if line.startswith("| [")]


def test_a_real_run_gives_one_row_per_configuration_with_its_figures():
    done = results_md_as_run(RUN)
    assert done.returncode == 0, done.stderr
    assert TABLE_HEADER in done.stdout
    # The figures of the run's report.md, to the report's precision; the peer baseline is not a row.
    assert table_rows(done.stdout) == [
        "| [1](#run-1) | `smollm2-eagle3` | open | none | 0.98× [0.93, 1.02] | 1 (the baseline) | – | – | 53.1 |",
        "| [1](#run-1) | `smollm2-eagle3` | open | eagle3 γ=2 | 0.70× [0.66, 0.73] | 0.71× [0.68, 0.74] | 1.39 | 19% | 37.9 |",
        "| [1](#run-1) | `smollm2-eagle3` | open | eagle3 γ=3 | 0.57× [0.54, 0.61] | 0.59× [0.55, 0.62] | 1.37 | 13% | 31.1 |",
    ]
    assert "### Run 1" in done.stdout
    assert ("specchat bench --profile smollm2-eagle3 --prompts open --gamma 2,3 --methods eagle3 --repeat 3 "
            "--max-new-tokens 128") in done.stdout


def test_the_rebuilt_command_asks_bench_for_the_configurations_the_run_has():
    # results.json keeps no command line: parse the rebuilt one with the CLI's own parser
    # (bench's options and the shared ones it declares) and check it yields exactly the run's
    # configurations.
    results = json.loads((RUN / "results.json").read_text())
    command = next(line for line in results_md(RUN).stdout.splitlines() if line.startswith("specchat bench"))
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert args.profile == results["environment"]["profile"]
    assert args.prompts == list(results["prompt_sets"])
    assert (args.repeat, args.max_new_tokens) == (results["settings"]["repeat"], results["settings"]["max_new_tokens"])
    configs = build_configs(parse_methods(args.methods), parse_gammas(args.gamma), has_draft=False,
                            peer=not args.no_peer, note=lambda _: None, peer_methods=PEER_METHODS["llama.cpp"],
                            has_head=True)
    assert [c.name for c in configs] == [c["name"] for c in results["configs"]]


def test_several_runs_sets_no_peer_and_a_busy_machine(tmp_path):
    results = json.loads((RUN / "results.json").read_text())
    # A second run without peer rows, on two sets, that bench found busy.
    other = json.loads(json.dumps(results))
    other["configs"] = [c for c in other["configs"] if c["runner"] != "peer"]
    other["aggregates"]["vs_peers"] = {}
    sets = other["aggregates"]["sets"]
    for figures in sets.values():
        figures.pop("peer:none")
    sets["repetitive"] = sets.pop("open")
    sets["unusual"] = json.loads(json.dumps(sets["repetitive"]))
    sets["all"] = sets.pop("all")
    other["prompt_sets"] = {"repetitive": {"source": "x"}, "unusual": {"source": "x"}}
    other["busy_machine"] = True
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(other))
    out = tmp_path / "RESULTS.md"

    done = results_md(RUN, tmp_path / "b" / "results.json", out=out)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    rows = table_rows(text)
    assert len(rows) == 3 + 3 * 3  # run 1: open; run 2: repetitive, unusual and the mixed total
    second = [r for r in rows if r.startswith("| [2]")]
    assert [r.split(" | ")[2] for r in second] == ["repetitive"] * 3 + ["unusual"] * 3 + ["all (mixed)"] * 3
    assert all(r.count("busy machine: timings unreliable") == 2 for r in second)
    assert "### Run 2" in text and "--prompts repetitive unusual" in text and "--no-peer" in text


def test_a_file_that_is_not_a_bench_run_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps({"profile": "x", "summary": {}}))  # a remote-server run's shape
    done = results_md(bad)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and str(bad) in done.stderr


def test_the_committed_results_page_is_the_scripts_output_shape():
    # RESULTS.md is regenerated from fresh runs, so its figures change; its shape must not:
    # generated (not hand-edited), one table, and a command for every run a row cites.
    text = (ROOT / "docs" / "benchmarks" / "RESULTS.md").read_text()
    assert "Generated by scripts/results-md.py" in text
    assert TABLE_HEADER in text
    cited = {row.split("](#run-")[1].split(")")[0] for row in table_rows(text)}
    assert cited
    for number in cited:
        section = text.split(f"### Run {number}\n", 1)[1]
        assert section.split("```sh\n", 1)[1].startswith("specchat bench ")


CONCURRENCY = FIXTURES / "bench" / "2026-12-01-cpu-concurrency"


def test_a_concurrency_run_gets_its_own_table_command_and_crossover_sentences():
    """A real ``bench --concurrency 1,2,4,8`` run (2026-12-01, the default profile, rows
    dropped): its own table per set and N, beside the one-chat table."""
    done = results_md(RUN, CONCURRENCY)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "## Several chats at once (`bench --concurrency`)" in text
    rows = [r for r in table_rows(text) if r.startswith("| [2](#run-2) | open | 4 | ngram γ=auto |")]
    assert len(rows) == 1 and "0.96× [0.95, 0.96]" in rows[0]  # × plain throughput, copied
    assert "- run 2: ngram γ=auto stops paying at N=8 on 'repetitive'" in text
    section = text.split("### Run 2\n", 1)[1]
    assert "--concurrency 1,2,4,8" in section.split("```sh\n", 1)[1].split("```")[0]
