"""``specchat bench``: does speculation pay on this machine, these models, these prompts? What each
mode compares: the parser's description below."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import signal
import sys
import time
from pathlib import Path

from specchat.config import load_profile
from specchat.errors import SpecchatError
from specchat.methods import METHODS, SPELLINGS
from specchat.sanitize import clean, clean_line

GAMMA_DEFAULT = "auto,1,2,3,5,8"  # --grid, one chat at a time; N at once runs auto unless --gamma says
SHARED = ("profile",)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench", help="measure speed-up (tokens/s, TTFT, ITL, acceptance) with vs without speculation",
        description="Benchmark speculative decoding against plain decoding on shipped or custom prompt sets. "
                    "By default: the profile's method at its own γ, plain decoding and one peer row (the peer "
                    "engine's plain generation); --grid, --gamma or --methods compare every method × γ instead. "
                    "Ctrl+C keeps the requests that finished and writes them. Results go to --out.")
    parser.add_argument("--prompts", nargs="+", default=["all"], metavar="SET|FILE",
                        help="prompt sets: repetitive, open, unusual, long, all (default), .toml/.jsonl files, "
                             "or spec-bench[:N]: Spec-Bench's 480 questions as six category sets (mt-bench, "
                             "translation, summarization, qa, math_reasoning, rag); :N takes N per category "
                             "(1-80), those at index i*80//N; mt-bench's N are shared over its 8 sub-categories "
                             "in order (N//8 each, one more to the first N mod 8), spaced the same way in each; "
                             "spec-bench/CATEGORY[:N] (e.g. spec-bench/qa:10): one category's set alone")
    parser.add_argument("--grid", action="store_true",
                        help="every proposer the profile can run × γ auto,1,2,3,5,8, with every peer row, instead "
                             "of the profile's own method and γ (hours on a CPU)")
    parser.add_argument("--gamma", metavar="LIST",
                        help=f"γ values, comma-separated integers and/or auto; implies --grid (its default: "
                             f"{GAMMA_DEFAULT})")
    parser.add_argument("--methods", metavar="LIST",
                        help=f"proposers to compare ({', '.join(SPELLINGS)}; implies --grid, whose default is those "
                             "the profile can run; none always runs)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="runs per prompt and configuration")
    parser.add_argument("--max-new-tokens", type=int, metavar="N",
                        help="tokens per reply (default: per set, e.g. 256; long: 1200)")
    parser.add_argument("--concurrency", default="1", metavar="LIST",
                        help="chats at once, e.g. 1,2,4,8: llama.cpp targets decode N together (batched, with and "
                             "without speculation, beside llama-server -np N) and report where speculation stops "
                             "paying; a transformers target runs one sequence, N requests queued (default 1)")
    parser.add_argument("--no-peer", action="store_true",
                        help="skip the peer rows (transformers' generate; for a GGUF target llama-cpp-python, in "
                             "this process so on its llama.cpp kernels, and (--grid, --concurrency) llama-server, on "
                             "stock kernels; each row's name says whose)")
    parser.add_argument("--peer-model", action="append", default=[], metavar="GGUF",
                        help="also run llama-cpp-python's plain generation on this GGUF file (another format of "
                             "the same weights, say); repeatable; llama.cpp targets only")
    parser.add_argument("--suffix-store", action="store_true",
                        help="also run each suffix row drafting from a store of the run's earlier replies (empty "
                             "at its start; a prompt's --repeat runs back to back): the cross-chat workload, "
                             "a question asked again in a new chat")
    parser.add_argument("--server-ngram", metavar="LIST",
                        help="llama-server's n-gram --spec-types run beside the ngram rows, comma-separated, or "
                             "none (default: every type it offers; each is a row over every request)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run per configuration")
    parser.add_argument("--plain-url", metavar="URL",
                        help="remote profiles: a second server of the same model started without speculation, "
                             "the plain side of the comparison")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: ./bench-results/<timestamp>)")
    return parser


def run(args: argparse.Namespace) -> int:
    from specchat.bench.concurrency import parse_levels
    from specchat.bench.configs import build_configs, default_configs, parse_gammas, parse_methods
    from specchat.bench.prompt_sets import load_prompt_sets
    from specchat.remote import is_remote

    levels = parse_levels(args.concurrency)
    args.concurrency = levels[0] if len(levels) == 1 else levels
    for name in ("repeat", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SpecchatError(f"--{name.replace('_', '-')} must be ≥ 1, got {value}", key=f"--{name}")
    profile = load_profile(args.profile)
    grid = args.grid or args.gamma is not None or args.methods is not None
    gammas = parse_gammas(args.gamma or GAMMA_DEFAULT)
    needs = ("", "draft", METHODS[profile.speculation.method].needs)  # a draft is skipped if the profile has none
    # --methods "" is a list of one empty name, refused as "," is: only no --methods means the default
    methods = parse_methods(args.methods if args.methods is not None
                            else ",".join(m.name for m in METHODS.values() if m.needs in needs) if grid
                            else f"{profile.speculation.method},none")
    sets = load_prompt_sets(args.prompts)
    if args.suffix_store and ("suffix" not in methods or args.concurrency != 1 or is_remote(profile)):
        raise SpecchatError("--suffix-store adds rows to suffix decoding's, one chat at a time, on a local model",
                            key="--suffix-store", hint="add suffix to --methods, and drop --concurrency and remote "
                                                       "profiles for that run")
    out_dir = args.out or Path("bench-results") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    from specchat.bench.configs import check_out_dir

    check_out_dir(out_dir)

    if is_remote(profile):
        return _remote(profile, sets, args, levels, out_dir)
    from rich.console import Console

    console = Console(stderr=True)
    # a line before torch and the models load (tens of seconds on a busy CPU): the run has begun
    console.print(clean_line(f"bench: {profile.name}:", _plan(profile, grid, args), "; loading the models…"),
                  markup=False, highlight=False)
    from specchat.loading import load_models

    # the loader loads a draft only for a draft_model profile; without one, draft_model is skipped
    loaded = load_models(profile, progress=lambda e: e.message and console.print(
        f"[{e.stage}] {clean_line(e.message)}", style="dim", markup=False, highlight=False))
    from specchat.bench.configs import process_kernels
    from specchat.bench.runner import peer_kind, peer_methods

    # this process's kernels: llama-cpp-python's peer rows run in it, so on ours
    kind, kernels = peer_kind(loaded), process_kernels(loaded) or ""
    if isinstance(args.concurrency, list) or (args.concurrency > 1 and kind == "llama.cpp"):
        return _concurrency(console, loaded, profile, sets, methods, args, levels, out_dir)
    for path in args.peer_model:
        if kind != "llama.cpp":
            raise SpecchatError("--peer-model needs a profile whose target runs on backend 'llama.cpp'",
                                key="--peer-model", hint='use a GGUF profile (e.g. the default), or drop --peer-model')
        if not Path(path).is_file():
            raise SpecchatError(f"--peer-model file '{path}' does not exist", key="--peer-model",
                                hint="give the path of a .gguf file")
    if not grid:
        configs = default_configs(profile.speculation.method, profile.speculation.num_speculative_tokens,
                                  not args.no_peer, tuple(str(Path(p).resolve()) for p in args.peer_model),
                                  args.suffix_store, kernels)
        return _run_and_report(console, loaded, profile, sets, configs, args, out_dir)
    has_peer_methods, no_head_peer = peer_methods(loaded, profile)
    if no_head_peer and not args.no_peer:
        console.print(f"[yellow]bench: {no_head_peer}; no peer:eagle3 row[/]")
    # the eagle3 / hybrid rows and the llama-server peer row run an EAGLE-3 head (not Medusa heads)
    has_eagle3 = loaded.head is not None and loaded.head.kind == "eagle3"
    medusa_heads = loaded.head.num_heads if loaded.head is not None and loaded.head.kind == "medusa" else 0
    from specchat.bench.peer_llama_server import ngram_types, plain_unavailable

    no_server = plain_unavailable(loaded) if kind == "llama.cpp" and not args.no_peer else "no peer"
    if no_server and kind == "llama.cpp" and not args.no_peer:
        console.print(f"[yellow]bench: {no_server}[/]")
    configs = build_configs(methods, gammas, loaded.draft is not None, not args.no_peer, has_head=has_eagle3,
                            note=lambda text: console.print(f"[yellow]{text}[/]"), peer_methods=has_peer_methods,
                            peer_models=tuple(str(Path(p).resolve()) for p in args.peer_model),
                            server_peer=not no_server, medusa_heads=medusa_heads,
                            server_ngram_types=() if no_server else server_ngram(args.server_ngram, ngram_types()),
                            suffix_store=args.suffix_store, kernels=kernels,
                            server_draft=(profile.speculation.max_speculative_tokens
                                          if loaded.draft is not None and loaded.draft.name == "llama.cpp" else 0))
    return _run_and_report(console, loaded, profile, sets, configs, args, out_dir)


def server_ngram(chosen: str | None, offered: tuple[str, ...]) -> tuple[str, ...]:
    """--server-ngram's types, of those llama-server offers (all of them when not given)."""
    if chosen is None:
        return offered
    names = tuple(t.strip() for t in chosen.split(",") if t.strip())
    if names == ("none",):
        return ()
    unknown = [t for t in names if t not in offered]
    if unknown or not names:
        raise SpecchatError(f"--server-ngram {chosen!r}: {', '.join(unknown) or 'no type'} is not one llama-server "
                            f"offers", key="--server-ngram", hint=f"give none or some of: {', '.join(offered) or '(none offered)'}")
    return names


def _plan(profile, grid: bool, args) -> str:
    """What this run compares, in words, for the line printed before anything loads."""
    if grid:
        return "every method × γ (--grid)"
    speculation = profile.speculation
    gamma = "auto" if METHODS[speculation.method].auto_only else speculation.num_speculative_tokens
    ours = "" if speculation.method == "none" else f"{speculation.method} γ={gamma} against "
    return f"{ours}plain decoding{'' if args.no_peer else ' and one peer row'} (--grid: every method × γ)"


def _concurrency(console, loaded, profile, sets, methods: list[str], args, levels: list[int], out_dir: Path) -> int:
    """N chats at once, decoded together (bench/concurrency.py)."""
    from specchat.bench.benchmark import benchmark_concurrency
    from specchat.bench.concurrency import check_context, level_configs
    from specchat.bench.concurrency_report import COLUMNS, comparison_lines, table_rows, write_outputs
    from specchat.bench.configs import loaded_methods, parse_gammas
    from specchat.bench.peer_llama_server import plain_unavailable
    from specchat.bench.runner import chat_requests
    from specchat.bench.report import render_rows
    from specchat.engine.batch.lanes import check_batchable

    if loaded.target.name != "llama.cpp":
        raise SpecchatError(f"--concurrency {','.join(map(str, levels))}: batched decoding runs on the llama.cpp "
                            f"backend; this profile's target runs on {loaded.target.name}, one sequence at a time",
                            key="--concurrency", hint="give --concurrency one number (requests then queue), or use a "
                                                      "GGUF profile such as the default")
    head = loaded.head.kind if loaded.head is not None else None
    methods = loaded_methods(methods, loaded.draft is not None, head == "eagle3", int(head == "medusa"),
                             note=lambda text: console.print(f"[yellow]{text}[/]"))
    skipped = [m for m in methods if not METHODS[m].batched]
    if skipped:
        console.print(f"[yellow]bench: a batched decode cannot run {', '.join(skipped)} (methods.py); skipping[/]")
    for m in methods:
        if m not in skipped:  # a tree: one line before anything runs
            check_batchable(dataclasses.replace(profile.speculation, method=m),
                            f"--concurrency {','.join(map(str, levels))}")
    no_server = "no peer" if args.no_peer else plain_unavailable(loaded)
    if no_server and not args.no_peer:
        console.print(f"[yellow]bench: {no_server}[/]")
    # more chats than the context holds: one line before any progress is drawn
    check_context(levels, chat_requests(loaded, profile, sets, args.max_new_tokens)[1], loaded.target.max_length)
    gammas = parse_gammas(args.gamma or "auto")
    configs = level_configs(methods, gammas, server=not no_server, single=1 in levels)
    console.print(f"bench: N = {', '.join(map(str, levels))} × {len(configs)} configurations × "
                  f"{len(sets)} sets × {args.repeat} repeats")
    results = _with_progress(console, lambda progress: benchmark_concurrency(
        loaded, profile, sets, configs, levels, repeat=args.repeat, max_new_tokens=args.max_new_tokens,
        progress=progress, warmup=not args.no_warmup))
    paths = write_outputs(out_dir, results)
    from rich.console import Console

    stdout = Console(file=sys.stdout, width=200)
    for name, levels_of in results["aggregates"]["by_set"].items():
        for sentence in [*results["aggregates"]["crossover"].get(name, {}).values(), *comparison_lines(levels_of)]:
            stdout.print(sentence, markup=False, highlight=False)
        render_rows(stdout, f"{'all sets' if name == 'all' else name}", COLUMNS, table_rows(levels_of))
    _say_outputs(console, results, paths)
    return 0


def _remote(profile, sets, args, levels: list[int], out_dir: Path) -> int:
    """A server speculates itself: compare it with a plain server (--plain-url)."""
    from specchat.bench.configs import written
    from specchat.remote.bench import remote_bench, table, write

    say = lambda text: print(clean(text), file=sys.stderr, flush=True)  # noqa: E731
    if max(levels) > 1:  # refused before any level runs, not after the first ones
        from specchat.remote.bench import check_concurrency

        check_concurrency(profile.target.url, max(levels), profile.target.api_key_env)
    for n in levels:  # one level after another, each in its own folder when there are several
        results = remote_bench(profile, sets, plain_url=args.plain_url, repeat=args.repeat,
                               max_new_tokens=args.max_new_tokens, concurrency=n, say=say)
        print(table(results))
        folder = out_dir / f"N{n}" if len(levels) > 1 else out_dir
        say(f"results: {written(folder, lambda where: write(where, results))}")
    return 0


def _run_and_report(console, loaded, profile, sets, configs, args, out_dir: Path) -> int:
    from rich.console import Console

    from specchat.bench.benchmark import benchmark, write_outputs
    from specchat.bench.report import concurrency_note, render_tables

    console.print(f"bench: {len(configs)} configurations × "
                  f"{sum(len(s.prompts) for s in sets) * args.repeat} requests "
                  f"({', '.join(c.name for c in configs)})")
    if (loaded.info or {}).get("precision"):
        console.print(f"precision: {loaded.info['precision']}", markup=False, highlight=False)
    if args.concurrency > 1:
        console.print(f"[yellow]--concurrency {args.concurrency}: {concurrency_note(args.concurrency)}[/]")
    # SIGTERM stops it as Ctrl-C does: the requests already run are kept and written
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises KeyboardInterrupt
    try:
        results = _with_progress(console, lambda progress: benchmark(
            loaded, profile, sets, configs, repeat=args.repeat, max_new_tokens=args.max_new_tokens,
            concurrency=args.concurrency, progress=progress, warmup=not args.no_warmup))
    except KeyboardInterrupt:  # the runner keeps whole requests; here none had finished
        console.print("bench: stopped before a request had run under every configuration; nothing to write",
                      markup=False, highlight=False)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    paths = write_outputs(out_dir, results)
    # piped output keeps the full table rather than wrapping at 80 columns
    stdout = Console(file=sys.stdout)
    render_tables(stdout if stdout.is_terminal else Console(file=sys.stdout, width=160), results)
    _say_outputs(console, results, paths)
    return 0


def _with_progress(console, work):
    """``work(progress)`` under a progress bar; its result. Not on a terminal (a log file),
    lines instead: each warm-up and the first timed run as they start (so a log shows the
    run under way within seconds), then one line a minute at most: requests done, time so
    far and an estimate of the rest."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not console.is_terminal:
        start, last, begun = time.monotonic(), [0.0], [False]

        def log(done: int, total: int, text: str) -> None:
            now = time.monotonic() - start
            if not total or not begun[0]:  # a warm-up (no total yet), or the first timed run
                begun[0] = bool(total)
                console.print(clean_line(f"bench: {done}/{total} runs," if total else "bench:", text),
                              markup=False, highlight=False)
            elif done and (now - last[0] >= 60 or done == total):
                last[0] = now
                left = now * (total - done) / done
                console.print(f"bench: {done}/{total} runs, {now / 60:.0f} min so far, about {left / 60:.0f} min "
                              "left", markup=False, highlight=False)

        return work(log)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("bench", total=None)

        def progress(done: int, total: int, text: str) -> None:
            bar.update(task, completed=done, total=total or None, description=text[:60])

        return work(progress)


def _say_outputs(console, results: dict, paths: dict) -> None:
    if results.get("stopped_early"):
        from specchat.bench.report import stopped_early_note

        console.print(f"[bold yellow]{stopped_early_note(results['stopped_early']).strip('*')}[/]")
    if results.get("busy_machine"):
        console.print(f"[bold yellow]busy machine: other processes used {results['cpu_others']:.0%} of the CPU "
                      "during this run — timings unreliable; rerun on a quiet machine[/]")
    console.print(f"results: {paths['json']}\nreport:  {paths['markdown']}")
    console.print(f"plot:    {paths['plot']}")
