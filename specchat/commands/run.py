"""``specchat run --profile P --prompt TEXT [--json]``: one reply, headless, on stdout (coloured
by provenance on a terminal, JSON lines with ``--json``), the speculation metrics on stderr."""

from __future__ import annotations

import argparse
import sys

from specchat.commands.interrupt import signals_cancel
from specchat.config import load_profile
from specchat.config.model import MAX_SPECULATIVE_TOKENS, parse_gamma
from specchat.errors import SpecchatError
from specchat.events import ErrorEvent, Notice, StepEvent, TurnFinished, TurnStarted, context_full_message
from specchat.sanitize import clean, clean_line, decode_input, inert_json

SHARED = ("profile", "no_record")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "run", help="answer one prompt headlessly (stdout), with speculation metrics",
        description="Load a profile's models, answer one prompt and print speculation metrics.")
    parser.add_argument("--prompt", required=True, help="the user message ('-' reads it from stdin)")
    parser.add_argument("--json", action="store_true", help="JSON lines: one per token, then a summary line")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="override sampling.max_new_tokens")
    parser.add_argument("--seed", type=int, metavar="N", help="override sampling.seed")
    parser.add_argument("--temperature", type=float, metavar="T", help="override sampling.temperature (0 = greedy)")
    parser.add_argument("--num-speculative-tokens", metavar="K|auto", help="override speculation.num_speculative_tokens")
    parser.add_argument("--system", metavar="TEXT", help="override chat.system_prompt")
    return parser


def run(args: argparse.Namespace) -> int:
    profile = apply_overrides(load_profile(args.profile), args)
    # Input is decoded once, here: bytes that are not UTF-8 become U+FFFD.
    prompt = sys.stdin.buffer.read().decode("utf-8", "replace") if args.prompt == "-" else decode_input(args.prompt)

    from specchat.remote import is_remote, open_chat
    from specchat.sessions.recorder import Recorder, build_header
    from specchat.sessions.recording_backend import RecordingBackend

    if is_remote(profile):  # the server speculates; nothing loads here
        chat, info = open_chat(profile, _progress_to_stderr)
    else:
        from specchat.engine.factory import build_chat
        from specchat.loading import load_models
        from specchat.sessions.suffix_replies import recorded_replies

        loaded = load_models(profile, progress=_progress_to_stderr)
        chat, info = build_chat(profile, loaded, recorded_replies, record=not args.no_record), loaded.info
    # recorded as the TUI's chats are; a recorder that cannot create its file says so, and the reply goes on
    recorder = Recorder.for_profile(profile, enabled=not args.no_record)
    recorder.start(build_header(profile, info))
    failure = recorder.take_failure()
    if failure:
        _say(f"specchat: warning: {failure}")
    backend = RecordingBackend(chat, recorder)
    try:
        with signals_cancel(backend.cancel) as caught:  # the turn is recorded as cancelled
            code = stream_reply(backend, prompt, profile, info, as_json=args.json)
        return caught.exit_code if caught.signum else code
    finally:
        recorder.close()
        if recorder.path is not None and recorder.failure is None:
            _say(f"recorded to {recorder.path}")


def _say(text: str) -> None:
    """One line on stderr, inert whatever it quotes (a path, a model's error)."""
    print(clean_line(text), file=sys.stderr, flush=True)


def apply_overrides(profile, args: argparse.Namespace):
    """Command-line overrides, validated by the same rules as the profile keys they replace."""
    sampling = {}
    for key in ("max_new_tokens", "seed", "temperature"):
        value = getattr(args, key)
        if value is not None:
            sampling[key] = checked_override(f"--{key.replace('_', '-')}", f"sampling.{key}", value)
    changes = {"sampling": sampling} if sampling else {}
    if args.num_speculative_tokens is not None:
        gamma = parse_gamma(args.num_speculative_tokens)
        if gamma is None:
            raise SpecchatError(f"--num-speculative-tokens {args.num_speculative_tokens!r} is not valid",
                                key="--num-speculative-tokens",
                                hint=f'use an integer from 1 to {MAX_SPECULATIVE_TOKENS} or "auto"')
        changes["speculation"] = {"num_speculative_tokens": gamma}
    if args.system is not None:
        changes["chat"] = {"system_prompt": decode_input(args.system)}
    return profile.replace(**changes) if changes else profile


def checked_override(flag: str, key: str, value):
    """``value`` if the profile key ``key`` allows it, else a one-line SpecchatError naming ``flag``."""
    from specchat.config.schema import value_problem

    problem = value_problem(key, value)
    if problem:
        raise SpecchatError(f"{flag} {value} is not valid", key=flag, hint=f"it {problem}")
    return value


def stream_reply(chat, prompt: str, profile, info: dict, as_json: bool) -> int:
    """Streams one reply to stdout. Model text is untrusted (a model can emit any
    byte): it is sanitised on a terminal or a pipe, and JSON-escaped with ``--json``."""
    from specchat.sessions.ansi import PROVENANCE_SGR, RESET  # "target" tokens keep the terminal's colour

    colour = not as_json and sys.stdout.isatty()
    failed = None
    finished = None
    prompt_tokens = 0
    for event in chat.send(prompt):
        if isinstance(event, StepEvent):
            for token in event.step.tokens:
                if as_json:
                    record = {"id": token.id, "text": token.text, "kind": token.kind, "p": token.p, "q": token.q}
                    print(inert_json(record))
                elif colour and PROVENANCE_SGR.get(token.kind):
                    sys.stdout.write(PROVENANCE_SGR[token.kind] + clean(token.text) + RESET)
                else:
                    sys.stdout.write(clean(token.text))
            sys.stdout.flush()
        elif isinstance(event, TurnStarted):
            prompt_tokens = event.prompt_tokens
            if event.note:  # once, e.g. a damaged suffix store rebuilt, speculation off
                _say(f"specchat: warning: {event.note}")
        elif isinstance(event, ErrorEvent):
            failed = event.message
        elif isinstance(event, Notice):
            _say(f"specchat: warning: {event.message}")
        elif isinstance(event, TurnFinished):
            finished = event
    notice = chat.take_notice()  # e.g. the suffix store could not be saved: there is no next turn to say it
    if notice:
        _say(f"specchat: warning: {notice}")
    turn = finished.metrics.get("turn", {}) if finished else {}
    if as_json:
        summary = {"type": "summary", "profile": profile.name,
                   "finish_reason": finished.finish_reason if finished else "error",
                   "text": finished.text if finished else "", "seconds": finished.t if finished else None,
                   "models": info, **turn}
        if finished and "server" in finished.metrics:  # a server's own counters across the turn
            summary["server_counters"] = finished.metrics["server"]
        print(inert_json(summary, default=str))
    else:
        sys.stdout.write("\n")
    sys.stdout.flush()
    print(clean(human_summary(turn, finished.finish_reason if finished else "error")), file=sys.stderr)
    if failed is None and finished is not None and finished.finish_reason == "context" and not turn.get("num_tokens"):
        failed = context_full_message(prompt_tokens)
    if info.get("precision"):
        print(clean(f"  precision: {info['precision']}"), file=sys.stderr)
    if failed:
        _say(f"specchat: error: {failed}")
        return 1
    return 0


def measured_text(m: dict) -> str:
    """The measured speed-up with its interval, or why it cannot be told."""
    value, interval = m.get("measured_speedup"), m.get("measured_speedup_interval")
    if value is None:
        return f"– ({m['measured_speedup_note']})" if m.get("measured_speedup_note") else "–"
    return f"{value:.2f}× [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else f"{value:.2f}×"


def verdict_text(m: dict) -> str:
    """The cost model's verdict and recommended γ; the paper's α > c as a reference."""
    verdict = m.get("verdict")
    gain = m.get("recommended_gain")
    text = ("too early to say" if verdict is None else
            f"{verdict} (recommended γ {m.get('best_gamma')}" + (f", expected {gain:.2f}× from here on)" if gain is not None
                                                                 else ")"))
    if m.get("breakeven") is not None:
        text += f"; paper's α > c: {'yes' if m['breakeven'] else 'no'} (ignores verification cost)"
    return text


def human_summary(m: dict, finish_reason: str) -> str:
    def fmt(key, spec=".2f", suffix=""):
        value = m.get(key)
        return "–" if value is None else f"{value:{spec}}{suffix}"

    lines = [
        f"— {m.get('num_tokens', 0)} tokens in {m.get('num_steps', 0)} steps ({finish_reason}), "
        f"{fmt('tokens_per_s', '.1f', ' tok/s')}",
        f"  mean acceptance length {fmt('mean_acceptance_length')}, draft acceptance rate "
        f"{fmt('draft_acceptance_rate', '.0%')}, α {fmt('alpha')}, c {fmt('cost_ratio', '.3f')}",
        f"  speedup: predicted {fmt('predicted_speedup', '.2f', '×')} for the steps as run, measured {measured_text(m)}",
        f"  verdict: {verdict_text(m)}",
    ]
    if m.get("busy_machine"):
        lines.append("  busy machine: timings unreliable (c, v(k) and the speed-ups are measured on a shared CPU)")
    return "\n".join(lines)


def _progress_to_stderr(event) -> None:
    if event.message and event.stage != "done":
        _say(f"[{event.stage}] {event.message}")  # quotes a server's words on connecting
