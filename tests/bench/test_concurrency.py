"""``bench --concurrency 1,2`` on the embedded default profile (real llama.cpp, real
llama-server when built): the results document's shape, closed-loop clients, the same
seeded replies with and without speculation in a batch, and bad input in one line.
No speed is asserted (benchmarks say that); the crossover sentence is checked on fixed
figures.
"""

from __future__ import annotations

import json

import pytest

from specchat.bench.concurrency_report import crossover
from specchat.cli import main
from tests.support.llama_server_helpers import server_dir
from tests.support.needs import needs_llama_cpp

KEYS = ("throughput_tokens_per_s", "request_tokens_per_s", "ttft_ms_p50", "itl_ms_p50", "itl_ms_p95")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conc")
    prompts = folder / "two.jsonl"  # one that quotes itself (n-gram drafts), one that does not
    prompts.write_text('{"prompt": "Repeat after me three times: the quick brown fox jumps over the lazy dog."}\n'
                       '{"prompt": "Name three colours."}\n')
    # the default profile on one thread: n_threads = 0 (a thread per core) under a test run that
    # keeps every core busy with a worker makes llama.cpp's threads (and llama-server's, which
    # take the same count) wait on each other at every op; no figure asserted here depends on it
    profile = folder / "one-thread.toml"
    profile.write_text('extends = "default"\n[target]\nn_threads = 1\n')
    out = folder / "out"
    code = main(["bench", "--profile", str(profile), "--concurrency", "1,2", "--prompts", str(prompts), "--max-new-tokens", "12",
                 "--methods", "ngram,none",  # the shape of the results, not every model-free method
                 "--no-warmup", "--out", str(out)] + ([] if server_dir() else ["--no-peer"]))
    assert code == 0
    return out, json.loads((out / "results.json").read_text())


@needs_llama_cpp
def test_results_per_level_and_configuration(results):
    out, doc = results
    agg = doc["aggregates"]
    assert doc["mode"] == "concurrency" and agg["levels"] == [1, 2]
    configs = ["none", "ngram γ=auto"] + (["peer:none (llama-server, stock kernels)",
                                            "peer:ngram (llama-server, stock kernels)"] if server_dir() else [])
    single = ["none (one sequence)", "ngram γ=auto (one sequence)"]  # N = 1's reference, N = 1 only
    assert agg["by_concurrency"]["1"]["none"]["vs_one_sequence"]["ratio"] > 0
    assert agg["by_concurrency"]["1"]["ngram γ=auto (one sequence)"]["throughput_vs_plain"]["ratio"] > 0
    for n in ("1", "2"):
        assert sorted(agg["by_concurrency"][n]) == sorted(configs + (single if n == "1" else []))
        for config in configs:
            figures = agg["by_concurrency"][n][config]
            assert all(figures[k] is not None and figures[k] >= 0 for k in KEYS), (n, config, figures)
        assert agg["by_concurrency"][n]["ngram γ=auto"]["throughput_vs_plain"]["ratio"] > 0
        if server_dir():
            assert agg["by_concurrency"][n]["none"]["vs_server_plain"]["ratio"] > 0
    # whose kernels: llama-server's stock, ours this process's (the patched build set-up makes, where it did)
    assert {r["kernels"] for r in doc["rows"] if r["runner"] == "peer"} <= {"stock"}
    assert {r["kernels"] for r in doc["rows"] if r["runner"] != "peer"} in ({"specchat"}, {"stock"})
    ours = [s for r in doc["rows"] if r["concurrency"] == 2 and r["runner"] == "specchat" for s in r["steps"]]
    assert max(s["batch_size"] for s in ours) == 2
    assert "ngram γ=auto" in agg["crossover"]["two"]
    assert (out / "report.md").read_text().startswith("# specchat bench --concurrency 1,2")
    assert (out / "speedup_vs_concurrency.png").read_bytes()[:4] == b"\x89PNG"


@needs_llama_cpp
def test_clients_are_closed_loop_and_speculation_keeps_the_seeded_replies(results):
    _, doc = results
    rows = [r for r in doc["rows"] if r["concurrency"] == 2 and r["config"] == "none"]
    assert len(rows) == 4  # two prompts, each twice: 2 × N requests
    starts = sorted(r["start_ms"] for r in rows)
    assert starts[:2] == [pytest.approx(starts[0], abs=50)] * 2 and starts[2] > starts[0] + 10
    # n-gram drafts are verified in the coupled form: a seed gives the plain reply, in a
    # batch too (up to a near-tie of batched arithmetic, which may part one now and then)
    plain = {(r["concurrency"], r["index"]): r["output_ids"] for r in doc["rows"] if r["config"] == "none"}
    spec = {(r["concurrency"], r["index"]): r["output_ids"] for r in doc["rows"] if r["config"] == "ngram γ=auto"}
    assert plain.keys() == spec.keys()
    assert sum(plain[k] == spec[k] for k in plain) >= 0.8 * len(plain)


@pytest.mark.parametrize("value, fragment", [
    ("0", "--concurrency value '0' is not valid"),
    ("2,x", "--concurrency value 'x' is not valid"),
])
def test_bad_levels_exit_2_in_one_line(capsys, value, fragment):
    assert main(["bench", "--concurrency", value]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


@needs_llama_cpp
def test_more_chats_than_the_context_holds_exit_2_in_one_line(capsys):
    assert main(["bench", "--concurrency", "1000", "--prompts", "open", "--no-peer"]) == 2
    err = capsys.readouterr().err
    assert "--concurrency 1000 needs 1000 sequences" in err and "target's context" in err
    assert "━" not in err  # refused before any progress bar is drawn


def test_a_transformers_target_runs_one_sequence_and_says_so(tiny_ngram_profile_path, capsys):
    assert main(["bench", "--profile", str(tiny_ngram_profile_path), "--concurrency", "1,2", "--no-peer"]) == 2
    assert "batched decoding runs on the llama.cpp backend" in capsys.readouterr().err


def level(ratio, ci=None):
    return {"none": {}, "ngram γ=auto": {"throughput_vs_plain": {"ratio": ratio, "ci": ci}}}


def test_the_crossover_sentence_names_the_n_where_speculation_stops_paying():
    said = crossover({"1": level(1.3, [1.2, 1.4]), "2": level(1.1), "4": level(0.95, [0.9, 1.0]), "8": level(0.9)},
                     "ngram γ=auto", "open")
    assert said.startswith("ngram γ=auto stops paying at N=4 on 'open': 0.95× [0.90, 1.00] at N=4")
    assert "after 1.10× at N=2" in said
    assert "pays at every N" in crossover({"1": level(1.2), "8": level(1.01)}, "ngram γ=auto", "all")
    assert "does not pay at any N" in crossover({"1": level(0.9), "8": level(0.8)}, "ngram γ=auto", "all")
