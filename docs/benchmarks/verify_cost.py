"""What verifying k drafts costs on the llama.cpp backend, against a plain step.

After a prompt of ``--ctx`` tokens (made-up ids: the cost does not depend on them), one
decode of the last token plus k drafts, with logits for all k + 1, then a rollback of the
drafts; median ms per k and v = ÷ the k = 0 step. Each call is one process; for an A/B of
specchat's llama.cpp patches, alternate processes with and without SPECCHAT_GGML_UPSTREAM=1
(read once per process by the patched library):

    G=$(ls -t ~/.cache/specchat/models/gguf/*.BF16.gguf | head -1)
    for i in 1 2; do
      SPECCHAT_GGML_UPSTREAM=1 .venv/bin/python docs/benchmarks/verify_cost.py $G --ctx 400
      .venv/bin/python docs/benchmarks/verify_cost.py $G --ctx 400
    done
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from specchat.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--ctx", type=int, default=127, help="prompt tokens before the step")
    parser.add_argument("--drafts", default="0,1,2,3,5,7", help="k values, comma-separated (0 first)")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    ks = [int(k) for k in args.drafts.split(",")]
    backend = LlamaCppBackend(args.gguf)
    prompt = list(range(1000, 1000 + args.ctx))
    backend.forward(prompt)
    times: dict[int, list[float]] = {k: [] for k in ks}
    for r in range(args.repeat):
        for k in ks:
            backend.forward(prompt)  # roll back to the prompt (re-runs its last token)
            start = time.perf_counter()
            backend.forward(prompt + [2000 + r], torch.tensor([3000 + i for i in range(k)]), num_logits=k + 1)
            times[k].append(time.perf_counter() - start)
    base = statistics.median(times[ks[0]])
    kernels = "upstream" if "SPECCHAT_GGML_UPSTREAM" in os.environ else "as built"
    print(f"ctx {args.ctx}, kernels {kernels}: " + "  ".join(
        f"k={k} {statistics.median(t) * 1e3:.1f} ms (v {statistics.median(t) / base:.2f})" for k, t in times.items()))


if __name__ == "__main__":
    main()
