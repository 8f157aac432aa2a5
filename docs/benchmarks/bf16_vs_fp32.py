"""transformers backend: plain decoding in float32 against bfloat16, alternating in one
process (so drift of the machine falls on both), then one bf16 verify step of 3 drafts
against a plain step.

    .venv/bin/python docs/benchmarks/bf16_vs_fp32.py [--profile smollm2-transformers]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specchat.config.loader import load_profile
from specchat.engine.backends import as_backend
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading.models import load_models

PROMPT = "Write a short story about a robot who learns to paint."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="smollm2-transformers")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    loaded = {dtype: load_models(load_profile(args.profile).replace(target={"dtype": dtype}))
              for dtype in ("float32", "bfloat16")}
    ids = loaded["float32"].tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                                          add_generation_prompt=True, tokenize=True)
    ids = list(ids if isinstance(ids, list) else ids["input_ids"])
    engines = {dtype: SpeculativeEngine(m.target, None) for dtype, m in loaded.items()}
    rates: dict[str, list[float]] = {dtype: [] for dtype in engines}
    for r in range(args.repeat):
        for dtype, engine in engines.items():
            engine.reset()
            start, n = time.perf_counter(), 0
            for step in engine.generate(list(ids), SamplingParams(temperature=0.6, top_p=0.9, seed=r),
                                        max_new_tokens=args.tokens):
                n += len(step.tokens)
            rates[dtype].append(n / (time.perf_counter() - start))
        print(r, {dtype: round(v[-1], 1) for dtype, v in rates.items()}, flush=True)
    f32, bf16 = (statistics.median(rates[d][1:]) for d in ("float32", "bfloat16"))  # the first is a warm-up
    print(f"median: float32 {f32:.1f} tok/s, bfloat16 {bf16:.1f} tok/s, ratio {bf16 / f32:.2f}")
    backend = as_backend(loaded["bfloat16"].target)
    for k in (0, 3):
        backend.reset()
        backend.forward(ids)
        times = []
        for _ in range(15):
            start = time.perf_counter()
            backend.forward(ids, torch.tensor(ids[5:5 + k], dtype=torch.long), num_logits=k + 1)
            times.append(time.perf_counter() - start)
        print(f"bf16 forward after {len(ids)} tokens, k={k}: {statistics.median(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
