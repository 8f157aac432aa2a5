"""``specchat plan [--profile P | --synthetic PAIR] [--alpha-from FILE] [--json]``: measure this
machine's c and v(k) for a profile, or for random-weight models in the shapes of a real pair
(specchat/synthetic.py), then say what speculation can pay at each α and γ (specchat/plan.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specchat import untrusted
from specchat.config import load_profile
from specchat.errors import SpecchatError
from specchat.events import StepEvent, StepStats, TurnFinished
from specchat.sanitize import clean, clean_line
from specchat.synthetic import PAIRS, cached, transformers_model

SHARED = ("profile",)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plan", help="measure the draft's cost c and the target's verify cost v(k) here; print the expected speed-up",
        description="Times the target's steps verifying 0..8 drafts at contexts of 256, 1,024 and 4,096 tokens "
                    "and the proposer's time per draft, then prints the expected speed-up over acceptance rate α "
                    "× draft length γ, each γ's break-even α and the best γ per α (the panel's formula, with these "
                    "measured costs). No acceptance is measured: α is the task's, the costs are this machine's.")
    parser.add_argument("--alpha-from", metavar="FILE",
                        help="measured acceptance: a recording (path, name or 'last') or a bench results.json; "
                             "prints its α in the geometric formula and its steps as run priced with these costs")
    parser.add_argument("--repeats", type=int, default=7, metavar="N", help="timed forwards per point (default 7)")
    parser.add_argument("--synthetic", metavar="PAIR", choices=sorted(PAIRS),
                        help="time random-weight GGUFs in the shapes of a real pair instead of a profile, built once "
                             "and cached (a few GB; nothing is downloaded): " + "; ".join(
                                 f"{k} = {t.name} {t.quant} + {d.name} {d.quant}" for k, (t, d) in PAIRS.items()))
    parser.add_argument("--backend", choices=("llama.cpp", "transformers"), default="llama.cpp",
                        help="with --synthetic: time the shapes as GGUFs on llama.cpp (default) or as transformers "
                             "models in bfloat16")
    parser.add_argument("--nf4", action="store_true",
                        help="with --synthetic --backend transformers: the target in 4-bit NF4 (bitsandbytes), as "
                             "quantization = \"4bit-nf4\" loads one; the draft stays bfloat16")
    parser.add_argument("--device", default=None, metavar="DEV",
                        help="with --synthetic --backend transformers: cuda (default where present) or cpu")
    parser.add_argument("--contexts", metavar="L,L,…",
                        help="context lengths to time at (default 256,1024,4096, and with --alpha-from also where its "
                             "steps' shortest tenth ran, if below 256; with --synthetic 256,1024: "
                             "an 8B model's 4,096-token prompt takes minutes on a laptop CPU)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return parser


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.repeats <= 100:
        raise SpecchatError(f"--repeats {args.repeats} is out of range", key="--repeats", hint="use 1 to 100")
    contexts = _contexts(args.contexts, (256, 1024) if args.synthetic else None)
    measured = _measured(args.alpha_from) if args.alpha_from else None
    if args.nf4 and not (args.synthetic and args.backend == "transformers"):
        raise SpecchatError("--nf4 quantises a synthetic transformers target", key="--nf4",
                            hint="use it with --synthetic PAIR --backend transformers")
    if args.synthetic:
        return _print(synthetic(args.synthetic, contexts, args.repeats, args.backend, args.device, args.nf4), args,
                      measured)
    profile = load_profile(args.profile)
    from specchat.remote import is_remote

    if is_remote(profile):
        raise SpecchatError(f"profile '{profile.name}' runs on a server: plan measures models run here",
                            key="target.backend", hint="plan a llama.cpp or transformers profile")
    from specchat.engine.factory import build_proposer, sampling_params
    from specchat.engine.engine import SpeculativeEngine
    from specchat.engine.gamma.controller import FixedGamma
    from specchat.engine.template import ChatTemplate
    from specchat.loading import load_models
    from specchat.engine.gamma.cost_model import MeasuredCosts
    from specchat.plan import CONTEXTS, draft_costs, measure_drafting, measure_target, report, task_contexts

    note = lambda text: print(clean_line("plan:", text), file=sys.stderr, flush=True)  # noqa: E731
    note(f"loading {profile.name} …")
    loaded = load_models(profile)
    note(f"timing {profile.name}'s target ({loaded.target.name}), a line per context and k …")
    from specchat.contention import BUSY_SHARE, CpuShare

    others = CpuShare()
    others.take(fresh=True)
    if measured and args.contexts is None:  # time where the task ran, too
        contexts = task_contexts(CONTEXTS, [step for m in measured for step in m["steps"]])
    steps, spread = measure_target(loaded.target, sampling_params(profile.sampling), repeats=args.repeats,
                                   progress=note, **({"contexts": contexts} if contexts else {}))
    if not steps:
        raise SpecchatError(f"the target's context ({loaded.target.max_length} tokens) is shorter than 256 + 9",
                            key="target.n_ctx", hint="plan a profile with a larger n_ctx")
    proposer = build_proposer(profile.speculation, loaded)
    prompt = ChatTemplate.of(profile, loaded.tokenizer).prompt_ids([{"role": "user", "content": DRAFT_PROMPT}])
    note(f"timing the proposer ({profile.speculation.method}) and plain decoding …")
    # a draft model drafts every step (γ = auto would set aside one that cannot pay after a few):
    # its time a draft over DRAFT_GAMMA-long chains, as bench's fixed-γ rows time it
    fixed = FixedGamma(min(DRAFT_GAMMA, proposer.max_speculative_tokens)) if proposer and proposer.drafting_model else None
    if fixed is not None:
        proposer.select(proposer.drafting_model)  # a hybrid's route: its model, not its lookup
    drafting = measure_drafting(SpeculativeEngine(loaded.target, proposer, controller=fixed), prompt)
    plain = measure_drafting(SpeculativeEngine(loaded.target, None), prompt)
    costs = MeasuredCosts(steps, draft_costs(drafting, plain, steps), profile.speculation.method, spread,
                          drafting.lookup_ms, (plain.outside_ms, drafting.outside_ms))
    share = others.take()
    figures = report(costs)
    figures.update(profile=profile.name, target=loaded.target.name, precision=loaded.target.precision,
                   cpu_others=share, busy_machine=share is not None and share > BUSY_SHARE)
    return _print(figures, args, measured)


def _print(figures: dict, args: argparse.Namespace, measured: list[dict] | None) -> int:
    if measured is not None:
        from specchat.engine.gamma.cost_model import MeasuredCosts

        costs = MeasuredCosts.from_report(figures)
        figures["measured"] = [{**m, "as_run": costs.as_run(m.pop("steps"))} for m in measured]
    if args.json:
        print(json.dumps(figures))
    else:  # the profile's name and the model's precision are a file's words: cleaned
        print(clean(render(figures)))
    return 0


def _contexts(text: str | None, default: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if text is None:
        return default
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() and 16 <= int(p) <= 131072 for p in parts):  # int('²') raises
        raise SpecchatError(f"--contexts {text!r} is not valid", key="--contexts",
                            hint="give context lengths of 16 to 131072 tokens, comma-separated: 256,1024")
    return tuple(sorted({int(p) for p in parts}))


def synthetic(pair: str, contexts: tuple[int, ...], repeats: int, backend: str = "llama.cpp",
              device: str | None = None, nf4: bool = False) -> dict:
    """Times the pair's synthetic target (k = 0..8 drafts) and its draft's one-token step
    at each context, on llama.cpp with this machine's threads (or as transformers models
    on ``device``): c = draft step / target step."""
    import gc

    from specchat.contention import BUSY_SHARE, CpuShare
    from specchat.engine.sampling import SamplingParams
    from specchat.engine.gamma.cost_model import MeasuredCosts
    from specchat.plan import measure_target, report

    target_shape, draft_shape = PAIRS[pair]
    note = lambda text: print(clean_line("plan:", text), file=sys.stderr, flush=True)  # noqa: E731
    if backend == "llama.cpp":
        from specchat.engine.backends.llamacpp import LlamaCppBackend

        paths = [cached(shape, note) for shape in (target_shape, draft_shape)]

        def load(i: int, room: int):
            return LlamaCppBackend(paths[i], n_ctx=room, max_ctx=room)
    else:
        import torch

        from specchat.engine.backends import as_backend

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")

        def load(i: int, room: int):
            return as_backend(transformers_model((target_shape, draft_shape)[i], device, nf4=nf4 and i == 0))
    others = CpuShare()
    others.take(fresh=True)
    timed = []
    for i, (shape, max_k) in enumerate(zip((target_shape, draft_shape), (8, 0))):
        what = f"{shape.quant}" if backend == "llama.cpp" else f"{'4-bit NF4' if nf4 and not i else 'bfloat16'} on {device}"
        note(f"timing {shape.name} ({what}) at contexts {', '.join(map(str, contexts))} …")
        model = load(i, max(contexts) + (max_k + 1) * (repeats + max_k + 4))  # room for measure_target's steps
        timed.append(measure_target(model, SamplingParams(temperature=0.6), contexts=contexts, max_k=max_k,  # the default profile's
                                    repeats=repeats, progress=note))
        del model  # its memory goes before the next model loads
        gc.collect()
    (steps, spread), (draft_steps, _) = timed
    share = others.take()
    figures = report(MeasuredCosts(steps, {c: t[0] for c, t in draft_steps.items()}, "draft_model", spread))
    formats = ((target_shape.quant, draft_shape.quant) if backend == "llama.cpp"
               else ("4bit-nf4/bfloat16" if nf4 else "bfloat16", "bfloat16"))
    figures.update(profile=f"synthetic {pair}", target=f"{target_shape.name} {formats[0]} ({backend})",
                   precision=f"random weights; draft {draft_shape.name} {formats[1]}",
                   cpu_others=share, busy_machine=share is not None and share > BUSY_SHARE)
    return figures


DRAFT_GAMMA = 3  # a draft model's chains while plan times it
# a request whose reply repeats part of it, so every proposer drafts while it is timed
DRAFT_PROMPT = "Repeat this sentence three times: the quick brown fox jumps over the lazy dog."


def _measured(name: str) -> list[dict]:
    """What a recording, or bench's results.json (per configuration and prompt set, and
    "all"), measured: its α and its steps as run, (context, drafts verified, drafts kept),
    each request's prompt step left out (plan knows nothing of prompts)."""
    def run_of(stats) -> list[tuple[int, int, int]]:
        return [(s.context_tokens, s.num_draft_tokens, s.num_accepted_tokens) for s in stats if not s.prefill_tokens]

    if name.endswith(".json"):  # bench's; untrusted like any file: every step is checked as a recording's is
        from specchat.sessions.validate import check_step_stats

        if not Path(name).is_file():  # checked before opening, as a recording is: a FIFO would block forever
            raise SpecchatError("not a regular file" if Path(name).exists() else "no such file", file=name,
                                hint="give the results.json that specchat bench wrote")

        def checked(step: dict) -> StepStats:
            check_step_stats(step, "rows[].steps[]")
            return StepStats(**step)

        try:
            results = untrusted.json_value(untrusted.read_text(name))
            groups: dict[tuple[str, str], list] = {}
            for row in results["rows"]:
                steps = run_of(checked(step) for step in row["steps"])
                for key in ((row["config"], row["set"]), (row["config"], "all")):
                    groups.setdefault((str(key[0]), str(key[1])), []).extend(steps)
            sets = results.get("aggregates", {}).get("sets", {})
            alphas = {key: (sets.get(key[1], {}).get(key[0]) or {}).get("alpha") for key in groups}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # ValueError: Unreadable
            raise SpecchatError(f"not a bench results.json ({type(e).__name__}: {e})", file=name,
                                hint="give the results.json that specchat bench wrote") from None
        out = [{"config": config, "set": set_name, "steps": steps,
                "alpha": a if isinstance(a := alphas[config, set_name], (int, float)) and 0 <= a <= 1 else None}
               for (config, set_name), steps in groups.items() if any(k for _, k, _ in steps)]
        if not out:
            raise SpecchatError("no configuration in it drafted", file=name, hint="give a bench run with speculation")
        return out
    from specchat.sessions.locate import locate
    from specchat.sessions.reader import read_recording

    recording = read_recording(locate(name))
    finished = [t.event for t in recording.events if isinstance(t.event, TurnFinished)]
    session = finished[-1].metrics.get("session") if finished else None
    alpha = session.get("alpha") if isinstance(session, dict) else None
    if not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise SpecchatError("the recording has no measured α (no turn that drafted)", file=str(recording.path),
                            hint="give a recording of a chat that speculated")
    steps = run_of(t.event.step.stats for t in recording.events if isinstance(t.event, StepEvent))
    return [{"config": "recording", "set": recording.path.name, "steps": steps, "alpha": float(alpha)}]


def render(figures: dict) -> str:
    from specchat.engine.gamma.cost_model import MeasuredCosts
    from specchat.plan import NOISY

    lines = [f"plan: {figures['profile']} on {figures['target']} ({figures['precision']}), proposer "
             f"{figures['source']}: {figures['draft_ms']:.2f} ms a draft"
             + (f", {figures['lookup_ms']:.2f} ms a step it drafts nothing for" if figures.get("lookup_ms") else "")
             + ("; around each step {:.2f} ms plain, {:.2f} ms speculating".format(*figures["outside_ms"])
                if any(figures.get("outside_ms") or ()) else "")]
    measured, costs = figures.get("measured") or [], MeasuredCosts.from_report(figures)
    if figures.get("busy_machine"):
        lines.append(f"busy machine: other processes used {figures['cpu_others']:.0%} of the CPU while timing — "
                     "these costs are not to be trusted; rerun on a quiet machine")
    for context, f in figures["contexts"].items():
        lines += ["", f"context {context} tokens: plain step {f['step_ms'][0]:.1f} ms, c = {f['c']:.3f}, "
                  "v(k) = " + " ".join(f"{v:.2f}" for v in f["v"][1:]) + "  (k = 1..8)",
                  "  α \\ γ " + "".join(f"{g:>7}" for g in range(1, len(f["v"]))) + "   best γ"]
        lines += [f"  {a:>5.2f} " + "".join(f"{x:>6.2f}×" for x in row) + f"   {best or 'none'}"
                  for a, row, best in zip(f["alphas"], f["speedup"], f["best_gamma"])]
        if f.get("spread") is not None and f["spread"] > NOISY:
            lines.append(f"  noisy: a point's timings spread over ±{f['spread'] / 2:.0%} of its median here — "
                         "more --repeats, or a quieter machine, before trusting these ratios")
        lines.append("  break-even α: " + " ".join(f"γ={g} {'–' if b is None else f'{b:.2f}'}"
                                                  for g, b in enumerate(f["break_even_alpha"], 1)))
        for m in measured:
            if m["alpha"] is not None:
                row = costs.speedups(int(context), [m["alpha"]])[0]
                best = max(range(len(row)), key=row.__getitem__)
                lines.append(f"  at {m['config']} on {m['set']}'s α = {m['alpha']:.2f} (geometric): "
                             f"best γ = {best + 1}, {row[best]:.2f}×")
    if measured:
        lines += ["", "their steps as run (each one's context, drafts and drafts kept), priced with these costs:"]
        lines += [f"  {m['config']} on {m['set']}: {m['as_run']:.2f}×" for m in measured if m["as_run"] is not None]
    return "\n".join(lines)
