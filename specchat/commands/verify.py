"""``specchat verify``: check on your own models and settings that speculative sampling draws from
exactly plain sampling's distribution (exit 0 PASS, 1 FAIL, 2 usage); ``--concurrency N`` checks
the batched engine, N sequences at once."""

from __future__ import annotations

import argparse
import json
import sys
import time
from specchat.config import load_profile
from specchat.errors import SpecchatError

MAX_CONCURRENCY = 64  # sequences one batched llama.cpp context takes here
SHARED = ("profile",)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verify", help="check that speculative sampling matches plain sampling (PASS/FAIL, exit 1 on FAIL)",
        description="Compare many seeded samples of the next few tokens from speculative and plain sampling "
                    "(total variation + chi-square, against the exact target distribution too), the exact law "
                    "of the sampler's first token read off its code, and a greedy token-by-token diff. Exit 0 on "
                    "PASS, 1 on FAIL, 2 on usage errors.")
    parser.add_argument("--samples", type=int, default=2000, metavar="N", help="samples of each kind (default 2000)")
    parser.add_argument("--tokens", type=int, default=3, metavar="K", help="tokens per sample (default 3)")
    parser.add_argument("--prompt", metavar="TEXT",
                        help="the user message (default: of a few questions whose replies repeat themselves, the "
                             "one whose next two tokens have the most likely values on these models)")
    parser.add_argument("--reply-start", metavar="TEXT",
                        help="the beginning of the assistant's reply, which the samples continue (default: the "
                             "default prompt's own start; none with --prompt; alone, it continues the yes/no question)")
    parser.add_argument("--gamma", type=int, metavar="K", help="drafts per step (default: the profile's γ)")
    parser.add_argument("--temperature", type=float, metavar="T", help="override sampling.temperature")
    parser.add_argument("--concurrency", type=int, default=1, metavar="N",
                        help="decode N sequences at once through the batched engine (llama.cpp profiles only) and "
                             "check those samples and greedy replies instead (default 1: one sequence)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.samples < 50:
        raise SpecchatError(f"--samples {args.samples} is too few for a statistical check", key="--samples",
                            hint="use at least 50 (2000 or more for a meaningful verdict)")
    if not 2 <= args.tokens <= 8:
        # with one token a reply is done after its first step, which never drafts (a draft
        # and the token after it are two), so speculation could not be exercised at all
        raise SpecchatError(f"--tokens {args.tokens} is out of range", key="--tokens",
                            hint="use 2 to 8 (one token leaves no room for a draft)")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise SpecchatError(f"--concurrency {args.concurrency} is out of range", key="--concurrency",
                            hint=f"use 1 to {MAX_CONCURRENCY} (1: one sequence, as plain verify)")
    if args.gamma is not None and not 1 <= args.gamma <= 16:
        raise SpecchatError(f"--gamma {args.gamma} is out of range", key="--gamma", hint="use 1 to 16")
    if args.prompt is not None and not args.prompt.strip():  # not the default's prompt in silence
        raise SpecchatError("--prompt is empty", key="--prompt", hint="give a prompt, or leave --prompt out")
    if args.temperature is not None:
        from specchat.commands.run import checked_override

        checked_override("--temperature", "sampling.temperature", args.temperature)
    profile = load_profile(args.profile)
    if profile.speculation.method == "none":
        raise SpecchatError(f"profile '{profile.name}' does not speculate (speculation.method = 'none')",
                            key="speculation.method", hint="verify a profile whose method is draft_model or ngram")
    if args.concurrency > 1 and profile.target.backend != "llama.cpp":
        raise SpecchatError(f"--concurrency {args.concurrency}: batched verify needs the llama.cpp backend, and "
                            f"profile '{profile.name}' runs on {profile.target.backend}", key="--concurrency",
                            hint="verify a llama.cpp profile (the default), or drop --concurrency")
    if args.temperature is not None:
        profile = profile.replace(sampling={"temperature": args.temperature})

    from specchat.commands.run import _progress_to_stderr
    from specchat.verify.single import DEFAULT_PROMPT, verify
    from specchat.loading import load_models

    loaded = load_models(profile, progress=_progress_to_stderr)
    prompt = args.prompt or (DEFAULT_PROMPT if args.reply_start is not None else None)  # None: verify chooses
    progress = _Progress()
    if args.concurrency > 1:
        from specchat.verify.batched import verify_batched

        report = verify_batched(loaded, profile, concurrency=args.concurrency, samples=args.samples,
                                tokens=args.tokens, prompt=prompt, reply_start=args.reply_start or "",
                                gamma=args.gamma, progress=progress)
    else:
        report = verify(loaded, profile, samples=args.samples, tokens=args.tokens, prompt=prompt,
                        reply_start=args.reply_start or "", gamma=args.gamma, progress=progress)
    print("", file=sys.stderr)
    if args.json:
        import dataclasses

        print(json.dumps({"passed": report.passed, "settings": report.settings, "speculation": report.speculation,
                          "speculation_auto": report.speculation_auto, "notes": report.notes,
                          "checks": [dataclasses.asdict(c) for c in report.checks]}, ensure_ascii=False, default=str))
    else:
        print(render(report))
    return 0 if report.passed else 1


def render(report) -> str:
    s = report.settings
    weights = f" ({s['precision']} weights)" if s.get("precision") in ("4bit", "8bit") else ""
    reply = f" (reply so far: {s['reply_start']!r})" if s.get("reply_start") else ""
    lines = [f"verify: {s['method']} γ={s['gamma']}, temperature {s['temperature']}, top_p {s['top_p']}, "
             f"top_k {s['top_k']}, {s['dtype']}{weights}; {s['samples']} samples × {s['tokens']} tokens of each kind; "
             f"prompt {s['prompt_tokens']} tokens{reply}"]
    if s.get("concurrency"):
        lines.append(f"batched: {s['concurrency']} sequences in each llama.cpp decode, the requests cycling through "
                     f"{', '.join(s['kinds'])} (drafts of different lengths in one decode)")
    if s.get("candidates"):
        others = ", ".join(f"{c['prompt']!r} {c['cells']}" + ("" if c["drafts"] else " (no draft)")
                           for c in s["candidates"][1:])
        lines.append(f"prompt chosen for width: {s['prompt_cells']} cells of the first {min(s['tokens'], 2)} "
                     f"token{'s' if s['tokens'] > 1 else ''} expected ≥ 5 times (other candidates: {others})")
    if s.get("greedy_prompt"):
        lines.append(f"{'greedy check' if s.get('concurrency') else 'batched-logit and greedy checks'} on "
                     f"{s['greedy_prompt']!r} (reply so far: "
                     f"{s['greedy_reply_start']!r}), where greedy drafts are long and often kept")
    sp = report.speculation
    if sp.get("drafted"):
        lines.append(f"speculation exercised: {sp['drafted']} drafts, {sp['accepted']} accepted, "
                     f"{sp['rejected']} rejected and resampled, {sp['bonus']} bonus tokens")
    auto = report.speculation_auto
    if auto is not None:
        lines.append(f"γ = auto (the profile's own controller) also checked: {auto['drafted']} drafts, "
                     f"{auto['accepted']} accepted, {auto['rejected']} rejected, {auto['bonus']} bonus tokens")
    lines += [f"  {note}" for note in report.notes]
    lines += ["  " + check.line() for check in report.checks]
    lines.append("rule: a check fails when χ² p < 0.001 or TV exceeds the 99.9th percentile of the TV an exact "
                 "sampler shows at this sample size")
    if any(check.name.startswith("exact law") for check in report.checks):
        from specchat.verify.law import LAW_BOUND

        lines.append(f"exact law: the first token's law read off the sampler's own code over a grid of its uniforms, "
                     f"refined where the token changes (no sampling noise); it fails when its TV from p exceeds "
                     f"{LAW_BOUND:g}")
    if any(check.power is not None for check in report.checks):
        lines.append("power: the chance the χ² rule alone fails on samples from the named bug's exact law, at "
                     "these cells and samples (a lower bound: the TV rule can only add)")
    lines.append(f"verdict: {'PASS' if report.passed else 'FAIL'}")
    return "\n".join(lines)


class _Progress:
    """verify's progress on stderr: one updating line on a terminal; elsewhere a line whenever
    the stage changes, at each tenth of a stage and at least every ``every_s`` (tenths of the
    whole run alone once left "choosing the prompt: 0/1" standing through minutes of sampling)."""

    def __init__(self, terminal: bool | None = None, every_s: float = 30.0) -> None:
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self.every_s = every_s
        self.last: tuple[str | None, int, float] = (None, -1, 0.0)  # stage, tenth, time of the last line

    def __call__(self, done: int, total: int, text: str) -> None:
        if self.terminal:
            print(f"\r{text}: {done}/{total}   ", end="", file=sys.stderr, flush=True)
            return
        tenth, now = 10 * done // max(total, 1), time.monotonic()
        stage, last_tenth, when = self.last
        if text != stage or tenth != last_tenth or now - when >= self.every_s:
            self.last = (text, tenth, now)
            print(f"verify: {text}: {done}/{total} ({100 * done // max(total, 1)} %)", file=sys.stderr, flush=True)
