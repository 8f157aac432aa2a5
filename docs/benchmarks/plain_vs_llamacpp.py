"""Plain decoding: our engine against llama-cpp-python's own ``Llama.generate`` on the
same GGUF, alternating in one process (so drift of the machine falls on both), with
``llama_decode`` timed on both sides: what is left per step is each side's own work
(sampling, bookkeeping).

    .venv/bin/python docs/benchmarks/plain_vs_llamacpp.py [--profile default] [--repeat 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

import llama_cpp
import llama_cpp._internals as internals

from specchat.config.loader import load_profile
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading.models import load_models

PROMPT = "Write a short story about a robot who learns to paint."
decode = {"s": 0.0, "n": 0}


def timed_decode(ctx, batch, _decode=llama_cpp.llama_decode):
    start = time.perf_counter()
    code = _decode(ctx, batch)
    decode["s"] += time.perf_counter() - start
    decode["n"] += 1
    return code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="default")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=12)
    args = parser.parse_args()
    llama_cpp.llama_decode = internals.llama_cpp.llama_decode = timed_decode  # both sides call it
    loaded = load_models(load_profile(args.profile).replace(speculation={"method": "none"}))
    target = loaded.target
    engine = SpeculativeEngine(target, None)
    peer = llama_cpp.Llama(model_path=target.model_path, n_ctx=target.max_length, n_threads=target.n_threads,
                           n_threads_batch=target.n_threads, flash_attn=target.flash_attn, verbose=False)
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                               tokenize=True)
    ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
    rates: dict[str, list[float]] = {"ours": [], "llama-cpp-python": []}
    for seed in range(args.repeat):
        line = []
        for side in rates:
            decode.update(s=0.0, n=0)
            start, n = time.perf_counter(), 0
            if side == "ours":
                engine.reset()
                params = SamplingParams(temperature=0.6, top_p=0.9, seed=seed)
                for step in engine.generate(list(ids), params, max_new_tokens=args.tokens):
                    n += len(step.tokens)
            else:
                peer.reset()
                peer.set_seed(seed)
                tokens = peer.generate(list(ids), temp=0.6, top_p=0.9, top_k=0, min_p=0.0, repeat_penalty=1.0,
                                       reset=True)
                for _ in tokens:
                    n += 1
                    if n >= args.tokens:
                        break
                tokens.close()
            elapsed = time.perf_counter() - start
            rates[side].append(n / elapsed)
            line.append(f"{side} {n / elapsed:.1f} tok/s (decode {decode['s'] / decode['n'] * 1e3:.2f} ms, "
                        f"rest {(elapsed - decode['s']) / n * 1e3:.2f} ms a token)")
        print(" | ".join(line), flush=True)
    ours, peer_rate = (statistics.median(v) for v in rates.values())
    print(f"median: ours {ours:.1f} tok/s, llama-cpp-python {peer_rate:.1f} tok/s, ratio {ours / peer_rate:.3f}")


if __name__ == "__main__":
    main()
