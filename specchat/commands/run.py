"""``specchat run --profile P --prompt TEXT [--json]``: one reply, headless.

Streams the reply to stdout — coloured by provenance on a terminal, plain when piped,
or as JSON lines (one per token, then a summary) with ``--json`` — and prints a
summary of the speculation metrics on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

# ANSI colours by provenance; "target" tokens keep the terminal's colour.
COLOURS = {"accepted": "\x1b[32m", "resampled": "\x1b[33m", "bonus": "\x1b[36m"}
RESET = "\x1b[0m"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "run",
        help="answer one prompt headlessly (stdout), with speculation metrics",
        description="Load a profile's models, answer one prompt and print speculation metrics.",
    )
    parser.add_argument("-p", "--profile", default="default", metavar="NAME|PATH", help="profile (default: default)")
    parser.add_argument("--prompt", required=True, help="the user message ('-' reads it from stdin)")
    parser.add_argument("--json", action="store_true", help="JSON lines: one per token, then a summary line")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="override sampling.max_new_tokens")
    parser.add_argument("--seed", type=int, metavar="N", help="override sampling.seed")
    parser.add_argument("--temperature", type=float, metavar="T", help="override sampling.temperature (0 = greedy)")
    parser.add_argument("--num-speculative-tokens", metavar="K|auto", help="override speculation.num_speculative_tokens")
    parser.add_argument("--system", metavar="TEXT", help="override chat.system_prompt")
    parser.add_argument("--no-record", action="store_true", help="do not record this reply (profiles record by default)")
    return parser


def run(args: argparse.Namespace) -> int:
    from specchat.config import load_profile

    profile = apply_overrides(load_profile(args.profile), args)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt

    from specchat.engine.factory import build_chat
    from specchat.loading import load_models
    from specchat.sessions.recording_backend import RecordingBackend

    loaded = load_models(profile, progress=_progress_to_stderr)
    chat = build_chat(profile, loaded)
    recorder = _recorder(profile, loaded.info, enabled=not args.no_record)
    try:
        return stream_reply(RecordingBackend(chat, recorder), prompt, profile, loaded.info, as_json=args.json)
    finally:
        recorder.close()
        if recorder.path is not None:
            print(f"recorded to {recorder.path}", file=sys.stderr)


def _recorder(profile, info: dict, enabled: bool):
    """The session recorder, as the TUI's (disabled by --no-record or ``record = false``)."""
    from specchat.sessions.recorder import Recorder, build_header

    recorder = Recorder.for_profile(profile, enabled=enabled)
    recorder.start(build_header(profile, info))
    return recorder


def apply_overrides(profile, args: argparse.Namespace):
    """Command-line overrides, validated like the profile keys they replace."""
    from specchat.errors import SpecchatError

    sampling = {}
    if args.max_new_tokens is not None:
        if args.max_new_tokens < 1:
            raise SpecchatError("--max-new-tokens must be ≥ 1", key="--max-new-tokens")
        sampling["max_new_tokens"] = args.max_new_tokens
    if args.seed is not None:
        sampling["seed"] = args.seed
    if args.temperature is not None:
        if args.temperature < 0:
            raise SpecchatError("--temperature must be ≥ 0", key="--temperature", hint="use 0 for greedy decoding")
        sampling["temperature"] = args.temperature
    changes = {"sampling": sampling} if sampling else {}
    if args.num_speculative_tokens is not None:
        changes["speculation"] = {"num_speculative_tokens": _gamma(args.num_speculative_tokens)}
    if args.system is not None:
        changes["chat"] = {"system_prompt": args.system}
    return profile.replace(**changes) if changes else profile


def _gamma(text: str):
    from specchat.errors import SpecchatError

    if text == "auto":
        return text
    if text.isdigit() and 1 <= int(text) <= 16:
        return int(text)
    raise SpecchatError(f"--num-speculative-tokens {text!r} is not valid", key="--num-speculative-tokens",
                        hint='use an integer from 1 to 16 or "auto"')


def stream_reply(chat, prompt: str, profile, info: dict, as_json: bool) -> int:
    from specchat.events import ErrorEvent, StepEvent, TurnFinished

    colour = not as_json and sys.stdout.isatty()
    failed = None
    finished = None
    for event in chat.send(prompt):
        if isinstance(event, StepEvent):
            for token in event.step.tokens:
                if as_json:
                    record = {"id": token.id, "text": token.text, "kind": token.kind, "p": token.p, "q": token.q}
                    print(json.dumps(record, ensure_ascii=False))
                elif colour and token.kind in COLOURS:
                    sys.stdout.write(COLOURS[token.kind] + token.text + RESET)
                else:
                    sys.stdout.write(token.text)
            sys.stdout.flush()
        elif isinstance(event, ErrorEvent):
            failed = event.message
        elif isinstance(event, TurnFinished):
            finished = event
    turn = finished.metrics.get("turn", {}) if finished else {}
    if as_json:
        summary = {"type": "summary", "profile": profile.name,
                   "finish_reason": finished.finish_reason if finished else "error",
                   "text": finished.text if finished else "", "seconds": finished.t if finished else None,
                   "models": info, **turn}
        print(json.dumps(summary, ensure_ascii=False, default=str))
    else:
        sys.stdout.write("\n")
    sys.stdout.flush()
    print(human_summary(turn, finished.finish_reason if finished else "error"), file=sys.stderr)
    if info.get("precision"):
        print(f"  precision: {info['precision']}", file=sys.stderr)
    if failed:
        print(f"specchat: error: {failed}", file=sys.stderr)
        return 1
    return 0


def human_summary(m: dict, finish_reason: str) -> str:
    def fmt(key, spec=".2f", suffix=""):
        value = m.get(key)
        return "–" if value is None else f"{value:{spec}}{suffix}"

    lines = [
        f"— {m.get('num_tokens', 0)} tokens in {m.get('num_steps', 0)} steps ({finish_reason}), "
        f"{fmt('tokens_per_s', '.1f', ' tok/s')}",
        f"  mean acceptance length {fmt('mean_acceptance_length')}, draft acceptance rate "
        f"{fmt('draft_acceptance_rate', '.0%')}, α {fmt('alpha')}, c {fmt('cost_ratio', '.3f')}",
        f"  speedup: predicted {fmt('predicted_speedup', '.2f', '×')}, measured {fmt('measured_speedup', '.2f', '×')}"
        + ("" if m.get("breakeven") is None else f"; α > c: {'yes' if m['breakeven'] else 'no'}"),
    ]
    return "\n".join(lines)


def _progress_to_stderr(event) -> None:
    if event.message and event.stage != "done":
        print(f"[{event.stage}] {event.message}", file=sys.stderr, flush=True)
