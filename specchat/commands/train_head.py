"""``specchat train-head``: train an EAGLE-3 head (or ``--kind medusa`` heads) for a profile's
target on its own replies, here, offline; written in the layout vLLM, SGLang and llama.cpp's
converter load. Stage by stage (training/pipeline.py): Ctrl+C keeps what is done, ``--resume``
carries on."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from specchat.config import load_profile
from specchat.errors import SpecchatError
from specchat.paths import cache_dir
from specchat.sanitize import clean_line

SHARED = ("profile",)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train-head", help="train an EAGLE-3 draft head on the target's own replies (offline, resumable)",
        description="Self-distil the profile's target on a shipped prompt corpus and train an EAGLE-3 head "
                    "on its hidden states (training-time test). The head is written in the SpecForge/vLLM "
                    "layout (config.json + model.safetensors). Ctrl+C keeps the last epoch; --resume continues.")
    parser.add_argument("--kind", default="eagle3", choices=["eagle3", "medusa"],
                        help="head kind (default eagle3; medusa: Medusa-1 heads on the final hidden state)")
    parser.add_argument("--heads", type=int, default=4, metavar="N", help="medusa: heads, one per draft (default 4)")
    parser.add_argument("--out", metavar="DIR", help="where the head goes (default: <cache>/heads/<profile>-eagle3)")
    parser.add_argument("--prompts", type=int, default=0, metavar="N", help="train on the first N corpus prompts (0: all)")
    parser.add_argument("--replies", type=int, default=1, metavar="N",
                        help="replies per prompt: one greedy, the rest sampled at 0.8; 1 (the default): every "
                             "other prompt greedy")
    parser.add_argument("--max-new-tokens", type=int, default=160, metavar="N", help="reply length (default 160)")
    parser.add_argument("--epochs", type=int, default=2, metavar="N", help="passes over the data (default 2)")
    parser.add_argument("--batch-tokens", type=int, default=0, metavar="N",
                        help="tokens a training step sees (default: 512 for eagle3, 2048 for medusa)")
    parser.add_argument("--ttt-steps", type=int, default=4, metavar="S", help="training-time-test depth (default 4)")
    parser.add_argument("--draft-vocab", type=int, default=4096, metavar="N", help="draft vocabulary size (default 4096)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    parser.add_argument("--resume", action="store_true", help="carry on from the work folder's stages")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run on 6 prompts (a pipeline check)")
    return parser


def run(args: argparse.Namespace) -> int:
    for flag, value, low in (("--prompts", args.prompts, 0), ("--max-new-tokens", args.max_new_tokens, 1),
                             ("--replies", args.replies, 1),
                             ("--epochs", args.epochs, 1), ("--ttt-steps", args.ttt_steps, 1),
                             ("--draft-vocab", args.draft_vocab, 16), ("--heads", args.heads, 1),
                             ("--batch-tokens", args.batch_tokens, 0)):
        if value < low:
            raise SpecchatError(f"{flag} {value} is out of range", key=flag,
                                hint="use 0 (the default) or more" if low == 0 else f"use at least {low}")
    profile = load_profile(args.profile)
    if profile.target.backend in ("llama-server", "vllm"):
        raise SpecchatError(f"profile '{profile.name}' runs its target on a server", key="target.backend",
                            hint="train a head with a profile whose target runs here (llama.cpp or transformers)")

    import torch

    from specchat.loading import load_models
    from specchat.training.pipeline import Plan, Stages, layer_ids_for
    from specchat.training.train import TrainConfig
    from specchat.training.workdir import prepare_work

    plan = Plan(prompts=args.prompts, max_new_tokens=args.max_new_tokens, draft_vocab=args.draft_vocab,
                replies=args.replies,
                train=TrainConfig(epochs=args.epochs, steps=args.ttt_steps, lr=args.lr,
                                  batch_tokens=args.batch_tokens or (512 if args.kind == "eagle3" else 2048)))
    if args.smoke:
        plan = Plan(prompts=6, held_out=2, max_new_tokens=12, draft_vocab=min(args.draft_vocab, 256), n_seq=3,
                    train=TrainConfig(epochs=1, steps=2, batch_tokens=256))
    out = Path(args.out) if args.out else cache_dir() / "heads" / f"{profile.name}-{args.kind}"
    work = prepare_work(out, args.resume)  # before the model loads: what it refuses is said at once
    # load messages and paths name a profile's sources: untrusted text, cleaned at the edge
    loaded = load_models(profile, progress=lambda e: print(f"[load] {clean_line(e.message)}", file=sys.stderr))
    from specchat.engine.backends import as_backend

    backend = as_backend(loaded.target)
    if args.kind == "medusa" and not backend.provides_final_hidden:
        raise SpecchatError(f"the target cannot hand out its final hidden states: {backend.final_hidden_note}",
                            key="target.backend", hint="Medusa heads need a transformers target or a llama.cpp "
                            "one of a listed architecture")
    if args.kind == "eagle3" and not backend.provides_features:
        raise SpecchatError(f"the target cannot hand out hidden states: {backend.features_note}",
                            key="target.backend", hint="EAGLE-3 heads need a llama.cpp (llama, qwen3, …) or "
                            "transformers target")
    torch.set_num_threads(max(1, getattr(backend, "n_threads", 0) or torch.get_num_threads()))
    stages = Stages(backend, loaded.tokenizer, work, plan, _bar,
                    lambda line: print(f"[train-head] {clean_line(line)}", file=sys.stderr))
    layer_ids = layer_ids_for(backend.num_layers)
    say = stages.say
    began = time.perf_counter()
    try:
        rows = stages.distill()
        say(f"distilled {len(rows)} replies ({sum(len(r['ids']) - r['reply_start'] for r in rows)} tokens)")
        draft_ids, covered = stages.vocabulary(rows)
        say(f"draft vocabulary: {draft_ids.numel()} tokens, {covered:.1%} of the reply tokens")
        if args.kind == "medusa":
            from specchat.training import medusa

            taught = medusa.teach_stage(stages, rows)
            history = medusa.train_and_export(stages, taught, rows, draft_ids, args.heads, out, args.resume)
        else:
            taught = stages.teach(rows, layer_ids)
            history = stages.train_and_export(taught, rows, layer_ids, draft_ids, out, args.resume)
    except KeyboardInterrupt:
        say(f"interrupted: what each stage finished is kept in {work}; run again with --resume to carry on")
        return 130
    size = (out / "model.safetensors").stat().st_size / 2**20
    say(f"head written to {out} ({size:.1f} MiB; {(time.perf_counter() - began) / 60:.1f} min in all, "
        f"{history.seconds / 60:.1f} of them training)")
    print(clean_line(str(out)))
    return 0


def _bar(total: int, label: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="", dynamic_ncols=True, file=sys.stderr, leave=True)
