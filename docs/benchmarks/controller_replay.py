"""Replays the γ = auto controller over recorded replies, without the model.

With n-gram drafts a seeded reply does not depend on γ (the coupled sampler: a draft is
kept iff it is the token the target draws anyway), so one plain run per request fixes
every draft's verdict, and a controller can be judged offline: this script feeds the
real ``AdaptiveGamma`` and ``NgramProposer`` the replies of ``specchat bench``'s requests
(same prompts, same seeds) and charges each step the median step time measured for its
number of drafts in a bench run (``results.json``: total − draft ms, by drafts), with
multiplicative noise. It prints the speed-up over plain decoding per set, and the
oracle's (the best γ at every step, knowing the verdicts) as the ceiling.

On a low-precision target a batched verify may round differently from a plain step, so a
real run's reply can part from the plain one at a near-tie; the replay follows the plain
reply throughout. Use it to compare controllers, and confirm with ``specchat bench``.

    python docs/benchmarks/controller_replay.py --costs bench-results/…/results.json
    python docs/benchmarks/controller_replay.py --costs … --max-gamma 5 10 --before
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import specchat.engine.gamma.controller as controller_module  # noqa: E402
from specchat.engine.gamma.controller import AdaptiveGamma  # noqa: E402
from specchat.engine.proposers import NgramProposer  # noqa: E402
from specchat.events import StepStats  # noqa: E402


def record_replies(profile_name: str, batches: list[tuple[list[str], int, int]]) -> list[dict]:
    """Plain seeded replies to the bench's requests (prompt ids and reply ids), for each
    (sets, repeat, max_new_tokens) batch."""
    from specchat.bench.prompt_sets import load_prompt_sets
    from specchat.bench.runner import BenchConfig, build_requests, make_engine
    from specchat.config.loader import load_profile
    from specchat.engine.session import ChatSession
    from specchat.engine.factory import sampling_params
    from specchat.loading.models import load_models

    profile = load_profile(profile_name)
    loaded = load_models(profile)
    base = sampling_params(profile.sampling)
    engine = make_engine(BenchConfig("none"), loaded, profile.speculation)
    chat = ChatSession(engine, loaded.tokenizer, system_prompt=profile.chat.system_prompt,
                       enable_thinking=profile.chat.enable_thinking)
    requests = [request for sets, repeat, max_new_tokens in batches
                for request in build_requests(load_prompt_sets(sets), chat, repeat, base.seed or 0, max_new_tokens)]
    out = []
    for request in requests:
        engine.reset()
        params = dataclasses.replace(base, seed=request.seed)
        reply = [t.id for step in engine.generate(list(request.ids), params, request.max_new_tokens,
                                                  set(chat.stop_token_ids)) for t in step.tokens]
        out.append({"set": request.set_name, "prompt": list(request.ids), "reply": reply})
    return out


def step_costs(results: Path, ceiling: int) -> dict[int, float]:
    """Median step time (ms, draft time excluded) by number of drafts, from a bench run;
    k not measured there is interpolated linearly (extrapolated from the last two)."""
    by_k = collections.defaultdict(list)
    for row in json.loads(results.read_text())["rows"]:
        for step in (row.get("steps") or [])[1:]:  # the first step also ran the prompt
            by_k[step["num_draft_tokens"]].append(step["total_ms"] - step["draft_ms"])
    known = {k: statistics.median(v) for k, v in by_k.items() if len(v) >= 5}
    points = sorted(known.items())
    costs = {}
    for k in range(ceiling + 1):
        if k in known:
            costs[k] = known[k]
            continue
        below = [p for p in points if p[0] < k][-1:] or points[:1]
        above = [p for p in points if p[0] > k][:1] or points[-2:-1]
        (k0, t0), (k1, t1) = below[0], above[0]
        costs[k] = t0 + (t1 - t0) * (k - k0) / (k1 - k0)
    return costs


def replay(replies: list[dict], costs: dict[int, float], ceiling: int, lookup: tuple[int, int],
           noise: float, seed: int) -> dict[str, float]:
    """Speed-up over plain per set, one controller across all requests (as in the bench)."""
    rng = random.Random(seed)
    proposer = NgramProposer("auto", lookup[0], lookup[1], ceiling)
    controller = AdaptiveGamma(ceiling, proposer)
    spent, plain = collections.Counter(), collections.Counter()
    for request in replies:
        controller.start_turn()
        ids, reply, pos = list(request["prompt"]), request["reply"], 0
        while pos < len(reply):
            gamma, _ = controller.choose(None, ids)
            gamma = max(0, min(gamma, len(reply) - pos - 1))
            drafts = proposer.lookup(ids, gamma)[0][:gamma] if gamma else []
            kept = 0
            while kept < len(drafts) and drafts[kept] == reply[pos + kept]:
                kept += 1
            ms = costs[len(drafts)] * max(0.5, 1.0 + rng.gauss(0.0, noise))
            first = pos == 0
            controller.observe(StepStats(num_speculative_tokens=gamma, num_draft_tokens=len(drafts),
                                         num_accepted_tokens=kept, total_ms=ms,
                                         prefill_tokens=len(ids) if first else 0), None)
            proposer.observe(kept)
            if not first:  # the prompt's step is the same for every controller
                spent[request["set"]] += ms
                plain[request["set"]] += (kept + 1) * costs[0]
            ids.extend(reply[pos:pos + kept + 1])
            pos += kept + 1
    return {name: plain[name] / spent[name] for name in spent}


def oracle(replies: list[dict], costs: dict[int, float], ceiling: int, lookup: tuple[int, int]) -> dict[str, float]:
    """The best γ at every step, knowing every verdict (dynamic programming per reply)."""
    proposer = NgramProposer("auto", lookup[0], lookup[1], ceiling)
    spent, plain = collections.Counter(), collections.Counter()
    for request in replies:
        prompt, reply = request["prompt"], request["reply"]
        best = [0.0] * (len(reply) + 1)
        for pos in range(len(reply) - 1, 0, -1):
            drafts = proposer.lookup(prompt + reply[:pos], ceiling)[0][: len(reply) - pos - 1]
            proposer.observe(0)
            options, kept = [costs[0] + best[pos + 1]], 0
            for k in range(1, len(drafts) + 1):
                if kept == k - 1 and drafts[k - 1] == reply[pos + k - 1]:
                    kept = k
                options.append(costs[k] + best[pos + kept + 1])
            best[pos] = min(options)
        spent[request["set"]] += best[1]
        plain[request["set"]] += (len(reply) - 1) * costs[0]
    return {name: plain[name] / spent[name] for name in spent if spent[name]}


def length_only() -> None:
    """The controller before consensus: keyed by the agreement length's bucket alone."""
    controller_module.match_key = lambda match: (controller_module.length_bucket(match.length), "alone")


def flat_prior() -> None:
    """The controller before match-length buckets: keyed by the n-gram matched (≤ 3), one
    prior (0.6) for every key."""
    controller_module.match_key = lambda match: (min(match.length, 3), "alone")
    controller_module.match_prior = lambda key: 0.6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--costs", type=Path, required=True, help="a bench run's results.json (step times by k)")
    parser.add_argument("--replies", type=Path, default=Path("controller-replies.json"),
                        help="recorded replies: read if present, else recorded here (default: %(default)s)")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--sets", nargs="+", default=["repetitive", "open", "unusual"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--long-repeat", type=int, default=1, help="also record the long set (600 tokens) this often")
    parser.add_argument("--max-gamma", type=int, nargs="+", default=[10])
    parser.add_argument("--noise", type=float, default=0.1, help="relative sd of each step's time")
    parser.add_argument("--seeds", type=int, default=4, help="noise seeds to average over")
    parser.add_argument("--before", action="store_true",
                        help="also replay the controller before consensus, and before match buckets")
    args = parser.parse_args()

    if args.replies.exists():
        replies = json.loads(args.replies.read_text())
    else:
        batches = [(args.sets, args.repeat, args.max_new_tokens)] + ([(["long"], args.long_repeat, 600)]
                                                                     if args.long_repeat else [])
        replies = record_replies(args.profile, batches)
        args.replies.write_text(json.dumps(replies))
    lookup = (1, 3)
    for ceiling in args.max_gamma:
        costs = step_costs(args.costs, ceiling)
        print(f"γ ≤ {ceiling}: step ms by drafts " + " ".join(f"{k}:{t:.1f}" for k, t in costs.items()))
        print("  oracle          " + _line(oracle(replies, costs, ceiling, lookup)))
        variants = [("consensus", None)] + ([("length only", length_only), ("flat prior", flat_prior)]
                                            if args.before else [])
        for name, patch in variants:
            saved = controller_module.match_key, controller_module.match_prior
            if patch:
                patch()
            try:
                runs = [replay(replies, costs, ceiling, lookup, args.noise, seed) for seed in range(args.seeds)]
            finally:
                controller_module.match_key, controller_module.match_prior = saved
            print(f"  {name:<15} " + _line({s: statistics.mean(r[s] for r in runs) for s in runs[0]}))


def _line(speedups: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.3f}×" for name, value in sorted(speedups.items()))


if __name__ == "__main__":
    main()
