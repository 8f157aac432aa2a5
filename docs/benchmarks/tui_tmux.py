"""The TUI in a real terminal (tmux) against `specchat run`: the same profile, prompt and
seed, alternating, each in a fresh process.

The TUI side starts `specchat` in a detached tmux session (160 × 45), types the prompt,
waits for the reply to stop at max_new_tokens and reads the panel's "measured tok/s"
(the engine's own figure for the turn, as `run` reports it). The run side is
`specchat run --json`'s tokens_per_s. Needs tmux.

    .venv/bin/python docs/benchmarks/tui_tmux.py --profile default --plain --repeat 3
    .venv/bin/python docs/benchmarks/tui_tmux.py --profile default --gamma 3 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specchat.sanitize import clean
from tui_vs_run import summary  # this folder: the same summary line

PROMPT = "Write a detailed story of about 400 words about a lighthouse keeper who finds a message in a bottle."
SESSION = "specchat-tui-bench"
SPECCHAT = str(Path(sys.executable).with_name("specchat"))


def write_profile(folder: Path, base: str, plain: bool, tokens: int, seed: int, gamma: int | None = None) -> Path:
    path = folder / "bench.toml"
    speculation = ('[speculation]\nmethod = "none"\n' if plain
                   else f"[speculation]\nnum_speculative_tokens = {gamma}\n" if gamma else "")
    path.write_text(f'extends = "{base}"\ndescription = "tui_tmux bench"\n{speculation}'
                    f"[sampling]\nseed = {seed}\nmax_new_tokens = {tokens}\n", encoding="utf-8")
    return path


def pane() -> str:
    """The pane's text, cleaned: it holds a model's reply, and may be printed below."""
    return clean(subprocess.run(["tmux", "capture-pane", "-p", "-t", SESSION], capture_output=True, text=True).stdout)


def wait_for(pattern: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = pane()
        if re.search(pattern, text):
            return text
        time.sleep(0.25)
    raise SystemExit(f"tui_tmux: {pattern!r} did not appear within {timeout:.0f} s; the pane:\n{pane()}")


def tui_side(profile: Path) -> float:
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", SESSION, "-x", "160", "-y", "45",
                    f"{SPECCHAT} --profile {profile}"], check=True)
    try:
        wait_for(r"profile \S+ loaded", 300)
        time.sleep(1.0)
        subprocess.run(["tmux", "send-keys", "-t", SESSION, "-l", PROMPT], check=True)
        subprocess.run(["tmux", "send-keys", "-t", SESSION, "Enter"], check=True)
        text = wait_for(r"max_new_tokens reached", 600)
        time.sleep(1.0)  # the panel settles at the turn's end
        text = pane()
        match = re.search(r"measured tok/s\s+([\d.]+)", text)
        if not match:
            raise SystemExit(f"tui_tmux: no 'measured tok/s' in the panel:\n{text}")
        return float(match.group(1))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def run_side(profile: Path) -> float:
    out = subprocess.run([SPECCHAT, "run", "--profile", str(profile), "--prompt", PROMPT, "--json"],
                         capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="default")
    parser.add_argument("--plain", action="store_true", help='speculation.method = "none"')
    parser.add_argument("--gamma", type=int, help="a fixed γ: the same steps on both sides (auto reacts to timing, "
                                                    "so the replies can differ at llama.cpp's batch-size rounding)")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"run": [], "tui": []}
    with tempfile.TemporaryDirectory() as folder:
        profile = write_profile(Path(folder), args.profile, args.plain, args.tokens, args.seed, args.gamma)
        for r in range(args.repeat):
            for side in ("run", "tui")[:: 1 if r % 2 == 0 else -1]:
                rate = run_side(profile) if side == "run" else tui_side(profile)
                rates[side].append(rate)
                print(f"repeat {r} {side}: {rate:.1f} tok/s", flush=True)
    print(summary(rates))


if __name__ == "__main__":
    main()
