"""``specchat replay FILE --simulate [--method M] [--gamma G]``: a recorded chat's acceptance
under a model-free proposer, at T = 0, without the model (bench/simulate.py)."""

from __future__ import annotations

from specchat.errors import SpecchatError


def simulate_recording(path, method: str | None, gamma: str | None) -> int:
    from specchat.bench.simulate import simulate
    from specchat.config.model import MAX_SPECULATIVE_TOKENS, SpeculationSpec
    from specchat.methods import METHODS
    from specchat.sanitize import clean_line
    from specchat.sessions.reader import read_recording
    from specchat.sessions.replay import recorded_settings, rebuild_metrics

    recording = read_recording(path)
    settings = recorded_settings(recording.header.profile)
    model_free = [m.name for m in METHODS.values() if m.builds]
    method = method or (settings["method"] if settings["method"] in model_free else "ngram")
    if method not in model_free:
        raise SpecchatError(f"--method '{method}' is not a model-free proposer", key="--method",
                            hint="use --method " + " or ".join(model_free))
    if gamma is None:
        gamma = settings["num_speculative_tokens"] if method == settings["method"] else 5
    elif gamma != "auto":
        if not gamma.isdigit() or not 1 <= int(gamma) <= MAX_SPECULATIVE_TOKENS:
            raise SpecchatError(f"--gamma '{gamma}' is not a γ", key="--gamma",
                                hint=f"give a whole number from 1 to {MAX_SPECULATIVE_TOKENS}, or auto")
        gamma = int(gamma)
    gamma = gamma or 5
    low, high = settings["prompt_lookup"]
    speculation = SpeculationSpec(method=method, num_speculative_tokens=gamma, prompt_lookup_min=low,
                                  prompt_lookup_max=high, max_speculative_tokens=max(settings["max_gamma"], 1))
    per_turn, session = simulate([t.event for t in recording.events], speculation, method, gamma,
                                 settings["max_new_tokens"])
    recorded = rebuild_metrics(recording)
    print(clean_line(f"simulated: {method}, γ = {gamma}, n-gram {low}..{high}, T = 0, over {len(per_turn)} turn{'s' if len(per_turn) != 1 else ''} "
                     f"of {path}"))
    if settings["temperature"]:
        print(clean_line(f"note: recorded at temperature {settings['temperature']:g}: drafts are judged against "
                         f"the sampled reply as a greedy target would judge them"))
    for i, steps in enumerate(per_turn, 1):
        tokens, drafted = sum(1 + s.num_accepted_tokens for s in steps), sum(s.num_draft_tokens for s in steps)
        kept = sum(s.num_accepted_tokens for s in steps)
        print(f"turn {i}: {len(steps)} steps, {drafted} drafts, {kept} kept, "
              f"{tokens / len(steps) if steps else 0:.2f} tokens a step")
    print(_line("simulated", session))
    print(_line(f"recorded ({settings['method']}, γ = {settings['num_speculative_tokens']})", recorded))
    return 0


def _line(label: str, m) -> str:
    mal = f"{m.mean_acceptance_length:.2f}" if m.mean_acceptance_length is not None else "–"
    alpha = f"{m.alpha:.2f}" if m.alpha is not None else "–"
    return (f"{label}: mean acceptance length {mal}, α {alpha}, {m.num_accepted_tokens} of "
            f"{m.num_draft_tokens} drafts kept in {m.num_steps} steps")
