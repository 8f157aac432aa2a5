"""Writes docs/benchmarks/RESULTS.md, the one table of current figures, from `specchat bench` output.

    python scripts/results-md.py RUN [RUN ...] [-o docs/benchmarks/RESULTS.md]

RUN is a folder `specchat bench --out` wrote (it holds results.json) or a results.json
file; runs are listed in the order given. Each row is one configuration of one run on one
prompt set, with the command that produced it. The figures are the aggregates bench
already computed (their definitions: specchat/bench/stats.py), copied, never recomputed,
so this script needs only the standard library and no model.

results.json does not keep the command line, so the command is rebuilt from what the file
does keep (profile, prompt sets, configurations, repeat, max_new_tokens, …); a "command"
key, where a run has one, is used as is. A profile that only changed the seed or sampling
shows under its own name. Remote-server runs (`bench --plain-url`) keep another schema and
are refused with one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specchat.bench.configs import PLAIN_PEERS  # llama-cpp-python's or transformers' plain row, by its kernels
from specchat.bench.report import attention_width

SHIPPED_SETS = ("repetitive", "open", "unusual", "long")  # specchat/bench/prompt_sets.py
ALL_SETS = "all"
BUSY = "busy machine: timings unreliable"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "RESULTS.md"

HOW_TO_READ = """\
## How to read this

- A row is one configuration of one run on one prompt set; the run's number leads to its
  command and machine below the table. Rerun the command to check a figure.
- **× llama.cpp plain**: this configuration's tokens/s over that of llama.cpp's own plain
  generation (llama-cpp-python's `generate`, bench's `peer:none` row, which runs in bench's
  process on the same kernels as ours: `peer:none (specchat's kernels)` in newer runs) on the same GGUF,
  prompts, seeds and thread count, paired request by request, with a 95 % paired bootstrap
  interval over requests. Above 1 with the whole interval above 1: faster than what a user
  would run instead. For a transformers target the peer is transformers' `generate`, and the
  cell says so. `none` is our own plain decoding, so its row measures our overhead.
- **× our plain**: the same ratio against `none`, our engine with no proposer.
- **mean acc. len** = 1 + accepted drafts / drafting steps, **accept rate** = accepted /
  drafted (vLLM's definitions); `–` for plain rows.
- **tok/s**: emitted tokens ÷ wall time from the call to the last token, prefill included;
  absolute speeds belong to the run's machine.
- An interval covers request-to-request spread within one run only. Reruns on our 2-core
  CPU moved by up to ~10 %, so read ratios whose interval touches 1 as "no difference
  shown". A run that bench found competing for the cores says
  """
HOW_TO_READ += f'"{BUSY}" instead of a ratio.'
HOW_TO_READ += """
- Per-request detail: `report.md` beside each run's `results.json`. Earlier runs and how the
  figures moved: [archive/](archive/README.md).
"""


class ResultsError(Exception):
    """One line naming the file and what is wrong with it."""


def load(spec: str) -> tuple[str, dict]:
    path = Path(spec)
    if path.is_dir():
        path = path / "results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot read it as JSON ({exc})") from None
    aggregates = results.get("aggregates") if isinstance(results, dict) else None
    if isinstance(aggregates, dict) and results.get("mode") == "concurrency" and "by_set" in aggregates:
        return str(path), results
    if not isinstance(aggregates, dict) or "sets" not in aggregates or "environment" not in results:
        raise ResultsError(f"{path}: not a `specchat bench` results.json (no aggregates.sets or environment; "
                           "remote-server runs are not supported)")
    return str(path), results


def prompts_arg(results: dict) -> list[str]:
    sets = results.get("prompt_sets", {})
    names = list(sets)
    if tuple(names) == SHIPPED_SETS:
        return ["all"]
    # A set of one's own is named by its file; a shipped one by its name; spec-bench's six by
    # the one spec that gave them all (their source), once.
    return list(dict.fromkeys(name if name in SHIPPED_SETS else str(sets[name].get("source", name))
                              for name in names))


def command(results: dict) -> str:
    if isinstance(results.get("command"), str):
        return results["command"]
    env, settings, configs = results["environment"], results.get("settings", {}), results.get("configs", [])
    ours = [c for c in configs if c.get("runner") in ("specchat", None) and c.get("method") != "none"]
    gammas = list(dict.fromkeys(str(c["gamma"]) for c in ours))
    methods = list(dict.fromkeys(c["method"] for c in ours)) or ["none"]
    peers = [c for c in configs if c.get("runner") == "peer"]
    parts = ["specchat bench", f"--profile {env['profile']}", "--prompts " + " ".join(prompts_arg(results))]
    if gammas:
        parts.append("--gamma " + ",".join(gammas))
    parts.append("--methods " + ",".join(methods))
    if settings.get("repeat", 1) != 1:
        parts.append(f"--repeat {settings['repeat']}")
    if settings.get("max_new_tokens"):
        parts.append(f"--max-new-tokens {settings['max_new_tokens']}")
    if settings.get("concurrency", 1) != 1:
        levels = settings["concurrency"]
        parts.append(f"--concurrency {','.join(map(str, levels)) if isinstance(levels, list) else levels}")
    if not peers:
        parts.append("--no-peer")
    parts += [f"--peer-model {c['model']}" for c in peers if c.get("model")]
    if settings.get("warmup") is False:
        parts.append("--no-warmup")
    return " ".join(parts)


def machine(results: dict) -> str:
    env, settings = results["environment"], results.get("settings", {})
    backend = env.get("backend") or "transformers"
    if env.get("target_format"):
        backend += f" {env['target_format']}"
    if env.get("llama_cpp_kernel"):
        backend += f" (small-batch kernels: {env['llama_cpp_kernel']}{attention_width(env)})"
    if env.get("llama_cpp_python"):
        backend += f" · llama-cpp-python {env['llama_cpp_python']}"
    where = env.get("device_name") or env.get("device") or "?"
    if env.get("cpu_threads"):
        where += f", {env['cpu_threads']} threads"
    parts = [results.get("created", "?"), f"profile `{env['profile']}`", backend, where]
    if settings.get("sampling"):
        parts.append(settings["sampling"])
    return " · ".join(parts)


def ratio_text(ratio: float | None, ci: list | None) -> str:
    if ratio is None:
        return "–"
    if not ci or None in ci:
        return f"{ratio:.2f}×"
    return f"{ratio:.2f}× [{ci[0]:.2f}, {ci[1]:.2f}]"


def busy(results: dict, figures: dict) -> bool:
    # Bench reports carry `busy_machine` once issue 27's measured figures land; older runs do not.
    return bool(figures.get("busy_machine") or results.get("busy_machine")
                or results["environment"].get("busy_machine"))


def rows(number: int, results: dict) -> list[str]:
    sets = results["aggregates"]["sets"]
    vs_peers = results["aggregates"].get("vs_peers", {})
    peer_label = "" if results["environment"].get("backend") == "llama.cpp" else " (vs transformers generate)"
    names = [n for n in sets if n != ALL_SETS] or list(sets)
    if len(names) > 1 and ALL_SETS in sets:
        names.append(ALL_SETS)  # the mixed total only adds something over two or more sets
    out = []
    for set_name in names:
        for config, f in sets[set_name].items():
            if config in PLAIN_PEERS:
                continue  # the baseline itself
            ratios = vs_peers.get(set_name, {}).get(config, {})
            peer = next((ratios[p] for p in PLAIN_PEERS if p in ratios), None)
            if busy(results, f):
                vs_peer = vs_ours = BUSY
            else:
                vs_peer = ratio_text(peer["ratio"], peer.get("ci")) + peer_label if peer else "–"
                vs_ours = "1 (the baseline)" if config == "none" else ratio_text(f.get("speedup"), f.get("speedup_ci"))
            drafted = bool(f.get("num_drafts"))
            length = f"{f['mean_acceptance_length']:.2f}" if drafted and f.get("mean_acceptance_length") else "–"
            rate = f"{f['draft_acceptance_rate']:.0%}" if drafted and f.get("draft_acceptance_rate") is not None else "–"
            speed = f"{f['tokens_per_s']:.1f}" if f.get("tokens_per_s") is not None else "–"
            label = "all (mixed)" if set_name == ALL_SETS else set_name
            out.append(f"| [{number}](#run-{number}) | `{results['environment']['profile']}` | {label} | {config} "
                       f"| {vs_peer} | {vs_ours} | {length} | {rate} | {speed} |")
    return out


def concurrency_rows(number: int, results: dict) -> list[str]:
    """Several chats at once: per set, N and configuration, throughput against plain
    decoding at the same N, against llama-server -np N's plain rows, and one client's speed."""
    out = []
    for set_name, levels in results["aggregates"]["by_set"].items():
        for n, configs in levels.items():
            for config, f in configs.items():
                plain = f.get("throughput_vs_plain")
                server = f.get("vs_server_plain")
                if busy(results, f):
                    vs_plain = vs_server = BUSY
                else:
                    vs_plain = ratio_text(plain["ratio"], plain.get("ci")) if plain else "1 (the baseline)"
                    vs_server = ratio_text(server["ratio"], server.get("ci")) if server else "–"
                one = f.get("request_tokens_per_s")
                label = "all (mixed)" if set_name == ALL_SETS else set_name
                out.append(f"| [{number}](#run-{number}) | {label} | {n} | {config} | {vs_plain} | {vs_server} "
                           f"| {f['throughput_tokens_per_s']:.1f} | {'–' if one is None else f'{one:.1f}'} |")
    return out


def render(runs: list[tuple[str, dict]]) -> str:
    single = [(i, r) for i, (_, r) in enumerate(runs, 1) if r.get("mode") != "concurrency"]
    several = [(i, r) for i, (_, r) in enumerate(runs, 1) if r.get("mode") == "concurrency"]
    lines = [
        "# Current benchmark figures", "",
        "<!-- Generated by scripts/results-md.py from `specchat bench` results.json files: edit the script",
        "     or rerun the benchmarks, not this file. -->", "",
        "| run | profile | set | config | × llama.cpp plain [95% CI] | × our plain [95% CI] "
        "| mean acc. len | accept rate | tok/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for number, results in single:
        lines += rows(number, results)
    if several:
        lines += ["", "## Several chats at once (`bench --concurrency`)", "",
                  "N closed-loop clients; ours decode together in one llama.cpp context, llama-server runs with "
                  "`-np N`. × plain: throughput over the same runner's plain decoding at the same N, paired by run.", ""]
        for number, results in several:
            for set_name, said in results["aggregates"]["crossover"].items():
                note = f" ({BUSY})" if results.get("busy_machine") else ""
                lines += [f"- run {number}: {text}{note}" for text in said.values()]
        lines += ["", "| run | set | N | config | × plain throughput [95% CI] | × llama-server -np N plain "
                  "| tok/s (all) | tok/s (one client) |", "|---|---|---|---|---|---|---|---|"]
        for number, results in several:
            lines += concurrency_rows(number, results)
    lines += ["", "## Runs", ""]
    for number, (_, results) in enumerate(runs, 1):
        requests = ({f.get("requests") for f in results["aggregates"]["sets"].get(ALL_SETS, {}).values()}
                    if "sets" in results["aggregates"] else set())
        per_config = f" · {requests.pop()} requests per configuration" if len(requests) == 1 else ""
        lines += [f"### Run {number}", "", f"{machine(results)}{per_config}", "",
                  "```sh", command(results), "```", ""]
    return "\n".join(lines) + "\n" + HOW_TO_READ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate docs/benchmarks/RESULTS.md from `specchat bench` output.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="a bench --out folder or its results.json")
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT,
                        help="where to write (default: this checkout's docs/benchmarks/RESULTS.md; - for stdout)")
    args = parser.parse_args(argv)
    try:
        runs = [load(spec) for spec in args.runs]
    except ResultsError as exc:
        print(f"results-md: {exc}", file=sys.stderr)
        return 2
    text = render(runs)
    if str(args.out) == "-":
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"results-md: wrote {args.out} ({len(runs)} run{'s' if len(runs) != 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
