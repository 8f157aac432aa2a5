"""How much a llama.cpp target's next-token law depends on how many rows a decode runs.

Speculative steps score a position in a decode of k + 1 rows (one sequence) or beside
other sequences' rows (the batched engine), where plain decoding runs one row. Exactness
holds against the logits each step computes; verify's reference law is enumerated from
one-sequence decodes. Where the CPU's kernels for the target's format differ by batch
shape, the two laws differ, and verify's sampled checks measure that difference beside
any sampling fault. This prints, for verify's own prompt on the profile's target:

1. one sequence: each position's logits from a (k + 1)-row decode against one-row decodes
   (k = 1..8): max |Δlogit| and the TV of the warped laws per row;
2. the batched context (--concurrency 4's, four sequences prefilled in one decode) against
   one sequence: the first token's law, and the second token's after each of the five
   likeliest first tokens, decoded as one row of four or alone.

Measured 2026-12-04, default profile (SmolLM2-135M BF16 GGUF, T = 0.6, top-p 0.9):
- AMD EPYC with AVX-512 BF16 (llama.cpp's BF16 path rounds activations to bf16): one
  sequence, max |Δlogit| 0.22 and per-row TV up to 0.025 (k = 7's 8th row); batched
  context, first token TV 0.010 (max |Δlogit| 0.11–0.13), second token up to 0.066 (one row
  alone, after t1 = 2066). `verify --profile default --concurrency 4` fails there by a hair
  (first two tokens: TV 0.0922 against its 0.0889 threshold, χ² p = 0.0013; at 6,000
  samples TV 0.0533 against 0.0529, p = 0.0016), on this session's tree and on the tree it
  started from alike: the law differs by the kernels' arithmetic, not by a sampling fault
  (the draws are coupled: the default and smollm2-suffix profiles gave identical samples).
- AVX2 machines (F16 by default) passed the same verify in earlier sessions.
- The same AVX-512 machine with the target converted to F16 (a profile `extends =
  "default"`, `[target] gguf_type = "F16"`): one sequence max |Δlogit| 0.031, per-row TV at
  most 0.0017; batched first token TV 0.0015, second at most 0.0015 — 7 to 40 times closer —
  and `verify --concurrency 4` PASSES (first two tokens TV 0.0863 against 0.0919, p = 0.0059).
  The price, measured right after (bench `--prompts open repetitive --methods ngram,none
  --gamma auto --repeat 2 --no-peer`, quiet, one run each): plain 91.7 tok/s in F16 against
  87.3 in BF16, n-gram γ = auto 106.3 against 109.5 (verifying drafts is dearer in F16), time
  to first token 82–155 ms against 58–118 ms. Choosing between them (gguf_type "auto" picks
  BF16 on this CPU) is a product decision left open: see the closing note of 2026-12-04.
  On Spec-Bench the price is larger (`bench --prompts spec-bench:3 --methods ngram,none
  --gamma auto --repeat 2 --max-new-tokens 256 --no-peer`, quiet, one run each, 5 min 52 s
  in all): plain 70.9 tok/s in BF16 against 69.9 in F16, n-gram γ = auto 108.3 (1.53×
  [1.41, 1.65]) against 89.3 (1.28× [1.20, 1.36]), first token 297 against 452 ms. BF16's
  many-row decodes are what make drafts cheap on this CPU, so F16 by default would give up
  about a sixth of speculation's speed for batch invariance.
- The same failing samples held against a reference enumerated in the batched context
  (first token from four prompts prefilled in one decode, as the engine's first admission
  runs them; each second token as one row of four) PASS: first two tokens TV 0.0878
  against 0.0959, χ² p = 0.0031 (against the one-sequence joint: TV 0.0927, p = 0.00096).
  The residual is the spread between decode shapes, which vary request by request.

    python docs/benchmarks/batch_shape_numerics.py [--profile P]
"""

from __future__ import annotations

import argparse

import torch

from specchat.config import load_profile
from specchat.engine.backends.llamacpp_batch import LlamaCppBatch
from specchat.engine.sampling import warp
from specchat.loading import load_models
from specchat.verify.single import choose_prompt, resolve


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="default")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    loaded = load_models(profile)
    params, gamma, factory, target = resolve(loaded, profile, None, None, None)
    ids = choose_prompt(loaded, profile, target, factory(loaded, profile, gamma), params, gamma, None, "", 2000, 3,
                        lambda *a: None).ids
    law = lambda logits: warp(logits[None], params)[0].double()  # noqa: E731
    cont, x = [], list(ids)  # a greedy continuation: every row a plausible context
    for _ in range(9):
        cont.append(int(target.forward(x)[0].argmax()))
        x.append(cont[-1])
    target.reset()
    target.forward(ids)
    single = [target.forward(ids + cont[:j])[0] for j in range(9)]
    print("one sequence: a (k + 1)-row decode against one-row decodes")
    for k in range(1, 9):
        target.reset()
        target.forward(ids)
        multi = target.forward(ids, extra=torch.tensor(cont[:k]), num_logits=k + 1)
        rows = [tv(law(single[j]), law(multi[j])) for j in range(k + 1)]
        delta = max(float((single[j] - multi[j]).abs().max()) for j in range(k + 1))
        print(f"  k={k}: max |Δlogit| {delta:.4f}, TV per row " + " ".join(f"{r:.4f}" for r in rows))
    print("batched context (4 sequences) against one sequence")
    target.reset()
    first = target.forward(ids)[0]
    batch = LlamaCppBatch(target, 4, 2048)
    try:
        prefill = torch.from_numpy(batch.decode_all([(t, i, s, i == len(ids) - 1) for s in range(4)
                                                     for i, t in enumerate(ids)]))
        print(f"  first token: TV {tv(law(first), law(prefill[0])):.4f}, "
              f"max |Δlogit| {float((first - prefill[0]).abs().max()):.4f}")
        for t in torch.topk(law(first), 5).indices.tolist():
            alone_ref = law(target.forward(ids + [t])[0])
            four = torch.from_numpy(batch.decode([(t, len(ids), s, True) for s in range(4)]))
            for s in range(4):
                batch.drop(s, len(ids))
            one = torch.from_numpy(batch.decode([(t, len(ids), 0, True)]))
            batch.drop(0, len(ids))
            print(f"  second token after {t}: TV as one row of four {tv(alone_ref, law(four[0])):.4f}, "
                  f"alone {tv(alone_ref, law(one[0])):.4f}")
    finally:
        batch.close()


if __name__ == "__main__":
    main()
