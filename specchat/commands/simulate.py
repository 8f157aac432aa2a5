"""``specchat replay FILE --simulate [--method M[,M]] [--gamma G]``: a recorded chat's acceptance
under each model-free proposer at T = 0, without the model, and the speed-up the cost model
predicts for it from the chat's own step times."""

from __future__ import annotations

import sys

from specchat.config.model import MAX_SPECULATIVE_TOKENS, SpeculationSpec, parse_gamma
from specchat.errors import SpecchatError
from specchat.events import StepEvent
from specchat.methods import METHODS
from specchat.sanitize import clean_line


def simulate_recording(path, method: str | None, gamma: str | None) -> int:
    parsed = None if gamma is None else parse_gamma(gamma)
    if gamma is not None and parsed is None:  # said before the recording is read and torch imported
        raise SpecchatError(f"--gamma '{gamma}' is not a γ", key="--gamma",
                            hint=f"give a whole number from 1 to {MAX_SPECULATIVE_TOKENS}, or auto")
    gamma = parsed
    from specchat.bench.simulate import simulate
    from specchat.sessions.reader import read_recording
    from specchat.sessions.replay import recorded_settings, rebuild_metrics

    recording = read_recording(path)
    settings = recorded_settings(recording.header.profile)
    model_free = [m.name for m in METHODS.values() if m.builds and not m.needs]
    # --method "" names one empty method, refused as "," is: only no --method means the default
    methods = (method.split(",") if method is not None
               else [settings["method"] if settings["method"] in model_free else "ngram"])
    for name in methods:
        if name not in model_free:
            raise SpecchatError(f"--method '{name}' is not a model-free proposer", key="--method",
                                hint="use --method " + " or ".join(model_free) + " (or both, comma-separated)")
    events = [t.event for t in recording.events]
    timed = [e.step.stats for e in events if isinstance(e, StepEvent)]
    low, high = settings["prompt_lookup"]
    if settings["temperature"]:
        print(clean_line(f"note: recorded at temperature {settings['temperature']:g}: drafts are judged against "
                         f"the sampled reply as a greedy target would judge them, so these are estimates"))
    for name in methods:
        g = gamma if gamma is not None else (settings["num_speculative_tokens"] if name == settings["method"] else 5)
        g = g or 5
        speculation = SpeculationSpec(method=name, num_speculative_tokens=g, prompt_lookup_min=low,
                                      prompt_lookup_max=high, max_speculative_tokens=max(settings["max_gamma"], 1))
        per_turn, session = simulate(events, speculation, name, g, settings["max_new_tokens"])
        print(clean_line(f"simulated: {name}, γ = {g}, n-gram {low}..{high}, T = 0, over {len(per_turn)} "
                         f"turn{'s' if len(per_turn) != 1 else ''} of {path}"))
        for i, steps in enumerate(per_turn, 1):
            tokens, drafted = sum(1 + s.num_accepted_tokens for s in steps), sum(s.num_draft_tokens for s in steps)
            kept = sum(s.num_accepted_tokens for s in steps)
            print(f"turn {i}: {len(steps)} steps, {drafted} drafts, {kept} kept, "
                  f"{tokens / len(steps) if steps else 0:.2f} tokens a step")
        gain = predicted_gain(timed, [s for steps in per_turn for s in steps])
        print(_line("simulated", session) + (f"; predicted {gain:.2f}× over plain decoding at this chat's "
                                             "measured step times" if gain else
                                             "; no prediction: the chat timed no plain and drafting steps"))
    recorded = rebuild_metrics(recording)
    print(_line(f"recorded ({settings['method']}, γ = {settings['num_speculative_tokens']})", recorded))
    if recording.damage is not None:  # as the headless replay says it: the figures above stop there
        print(clean_line(f"specchat replay: simulated up to the damage: {recording.damage}"), file=sys.stderr)
        return 1
    return 0


def predicted_gain(recorded, simulated) -> float | None:
    """Σ tokens / Σ T(k)/w(0) over the simulated steps, each step's time the cost model's
    at its context from the recorded chat's own timings (the engine's one cost model)."""
    from specchat.engine.gamma.cost_model import CostModel

    model = CostModel(max_gamma=MAX_SPECULATIVE_TOKENS)
    for stats in recorded:
        model.observe(stats, ("", ()), stats.draft_source)
    tokens = cost = 0.0
    for stats in simulated[1:]:  # the first step ran the prompt: the same for every method
        model.at(stats.context_tokens)
        w0, w = model.w(0), model.w(stats.num_draft_tokens)
        if not w0 or w is None:
            return None
        tokens, cost = tokens + 1 + stats.num_accepted_tokens, cost + w / w0
    return tokens / cost if cost else None


def _line(label: str, m) -> str:
    mal = f"{m.mean_acceptance_length:.2f}" if m.mean_acceptance_length is not None else "–"
    alpha = f"{m.alpha:.2f}" if m.alpha is not None else "–"
    return (f"{label}: mean acceptance length {mal}, α {alpha}, {m.num_accepted_tokens} of "
            f"{m.num_draft_tokens} drafts kept in {m.num_steps} steps")
