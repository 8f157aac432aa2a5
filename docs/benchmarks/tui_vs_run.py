"""TUI tokens/s against `specchat run` on the same prompt, profile and seed.

Both sides load the profile the same way (specchat.live.LiveLoader, recording on, as a
user runs them) and answer the same prompt with the same seed; the reply is therefore
the same tokens. ``run``'s side consumes ChatSession.send's events as `specchat run`
does (recorder included); the TUI's side is the real app (headless, Pilot), timed from
Enter to the moment the last token is on screen. Alternating, ``--repeat`` times.

    .venv/bin/python docs/benchmarks/tui_vs_run.py --profile default --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
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
    count, start = 0, None
    for event in backend.send(PROMPT):
        if start is None:
            start = time.perf_counter()
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="default")
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rates = {"run": [], "tui": []}
    run_side(args.profile, 8, seed=1)  # warm-up: first calls pay one-off costs
    tui_side(args.profile, 8, seed=1)
    for r in range(args.repeat):
        for side, fn in (("run", run_side), ("tui", tui_side))[:: 1 if r % 2 == 0 else -1]:
            n, s = fn(args.profile, args.tokens, seed=1000 + r)
            rates[side].append(n / s)
            print(f"repeat {r} {side}: {n} tokens in {s:.2f} s = {n / s:.1f} tok/s", flush=True)
    run, tui = statistics.median(rates["run"]), statistics.median(rates["tui"])
    print(f"median: run {run:.1f} tok/s, TUI {tui:.1f} tok/s, TUI/run {tui / run:.3f}")


if __name__ == "__main__":
    main()
