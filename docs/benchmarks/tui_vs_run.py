"""TUI tokens/s against `specchat run` on the same prompt, profile and seed.

Both sides load the profile the same way (specchat.live.LiveLoader, recording on, as a
user runs them) and answer the same prompt with the same seed; the reply is therefore
the same tokens. ``run``'s side consumes ChatSession.send's events as `specchat run`
does (recorder included); the TUI's side is the real app (headless, Pilot), timed from
Enter to the moment the last token is applied. Alternating, ``--repeat`` times, each
measurement in a process of its own (after a short warm-up turn there).

    .venv/bin/python docs/benchmarks/tui_vs_run.py --profile default --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

PROMPT = "Write a detailed story of about 400 words about a lighthouse keeper who finds a message in a bottle."


def run_side(profile: str, tokens: int, seed: int) -> tuple[int, float]:
    from specchat.config import load_profile
    from specchat.live import LiveLoader

    loaded = LiveLoader(record=True, quiet=True)(load_profile(profile).replace(
        sampling={"seed": seed, "max_new_tokens": tokens}), lambda e: None)
    backend = loaded.backend
    count, start = 0, time.perf_counter()  # from the request, as the TUI's side is timed from Enter
    for event in backend.send(PROMPT):
        count += len(getattr(getattr(event, "step", None), "tokens", ()) or ())
    elapsed = time.perf_counter() - start
    loaded.close()
    return count, elapsed


def tui_side(profile: str, tokens: int, seed: int) -> tuple[int, float]:
    from specchat.config import load_profile
    from specchat.live import LiveLoader
    from specchat.ui.app import SpecchatApp

    result = {}

    async def main():
        built = load_profile(profile).replace(sampling={"seed": seed, "max_new_tokens": tokens})
        app = SpecchatApp(None, loader=lambda ref, progress: LiveLoader(record=True, quiet=True)(built, progress))
        async with app.run_test(size=(130, 40)) as pilot:
            while app.loaded is None:
                await pilot.pause(0.05)
            app.chat.input.text = PROMPT
            app.chat.input.focus()
            start = time.perf_counter()
            await pilot.press("enter")
            # poll gently: Pilot.pause() makes the app process and redraw, which would
            # charge the harness's own work to the TUI
            while app.turns_ended < 1:
                await asyncio.sleep(0.05)
            result["elapsed"] = app.turn_ended_at - start  # the last batch was applied then
            result["tokens"] = len(app.chat.transcript.last_reply.tokens)

    asyncio.run(main())
    return result["tokens"], result["elapsed"]


def measure(side: str, profile: str, tokens: int, seed: int) -> tuple[int, float]:
    """One side in a fresh process: a model loaded earlier in the same process (its
    llama.cpp threads, its memory) would slow whichever side runs after it."""
    out = subprocess.run([sys.executable, __file__, "--side", side, "--profile", profile, "--tokens", str(tokens),
                          "--seed", str(seed)], capture_output=True, text=True, check=True).stdout
    n, s = out.split()[-2:]
    return int(n), float(s)


def median_ci(values: list[float], resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval for the median of ``values``."""
    import random

    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def summary(rates: dict[str, list[float]]) -> str:
    """Medians of each side, and the median of the paired ratios with its 95 % bootstrap
    interval: each repeat's two sides share a seed (the same reply), so the pairs are the
    measure."""
    run, tui = statistics.median(rates["run"]), statistics.median(rates["tui"])
    pairs = [t / r for t, r in zip(rates["tui"], rates["run"])]
    low, high = median_ci(pairs)
    return (f"median: run {run:.1f} tok/s, TUI {tui:.1f} tok/s, TUI/run {tui / run:.3f}; "
            f"paired TUI/run: median {statistics.median(pairs):.3f} [95 % CI {low:.3f}, {high:.3f}] ("
            + ", ".join(f"{x:.3f}" for x in pairs) + ")")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="default")
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--side", choices=("run", "tui"), help=argparse.SUPPRESS)  # one measurement
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        fn = run_side if args.side == "run" else tui_side
        fn(args.profile, 8, seed=1)  # warm-up: first calls pay one-off costs
        n, s = fn(args.profile, args.tokens, seed=args.seed)
        print(n, s)
        return
    rates = {"run": [], "tui": []}
    for r in range(args.repeat):
        for side in ("run", "tui")[:: 1 if r % 2 == 0 else -1]:
            n, s = measure(side, args.profile, args.tokens, seed=1000 + r)
            rates[side].append(n / s)
            print(f"repeat {r} {side}: {n} tokens in {s:.2f} s = {n / s:.1f} tok/s", flush=True)
    print(summary(rates))


if __name__ == "__main__":
    main()
