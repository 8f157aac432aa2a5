"""Measures, per GGUF format, how far llama.cpp's batched logits stray from one-token
steps on the embedded SmolLM2-135M (the numbers behind near_tie.GGUF_NOISE_BOUND).

For each format (the wheel's Q4_1 converted by llama.cpp's own quantiser, as a profile's
gguf_type does), each prompt, batch width (verify's k+1, up to 11 at γ = 10) and thread
count, it prints verify.batch_logit_noise: the largest |Δ logit| over 24 greedy
positions, batches passed as drafts after a rollback, exactly as verification runs.

    .venv/bin/python scripts/measure-batch-noise.py [FORMAT ...]
"""

from __future__ import annotations

import sys

import llama_cpp

from specchat.verify.single import DEFAULT_PROMPT, DEFAULT_REPLY_START, batch_logit_noise
from specchat.engine.backends.llamacpp import LlamaCppBackend
from specchat.loading.embedded import find_gguf
from specchat.loading.gguf_tokenizer import GgufTokenizer
from specchat.loading.llamacpp import converted_gguf

FORMATS = ["F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_1", "Q4_0"]
PROMPTS = [(DEFAULT_PROMPT, DEFAULT_REPLY_START),
           ("Rewrite this with a docstring and type hints: def add(a, b): return a + b", ""),
           ("Summarise the causes of the French Revolution in three sentences.", "The French Revolution")]
WIDTHS = (2, 4, 8, 11)
THREADS = (1,)  # more where the cores are free: on our shared 2-core machine two threads spun for minutes


def main(formats: list[str]) -> None:
    source = find_gguf()
    for fmt in formats:
        path = source if fmt == "Q4_1" else converted_gguf(llama_cpp, source, fmt, "target")
        worst = 0.0
        for threads in THREADS:
            backend = LlamaCppBackend(path, n_threads=threads, max_ctx=1024)
            tokenizer = GgufTokenizer(backend.llm)
            for prompt, start in PROMPTS:
                ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
                ids += tokenizer(start, add_special_tokens=False)["input_ids"] if start else []
                row = [batch_logit_noise(backend, ids, tokens=24, width=w).delta for w in WIDTHS]
                worst = max(worst, *row)
                print(f"{backend.precision:<12} threads {threads}  {prompt[:24]!r:<28} "
                      + "  ".join(f"w{w} {d:.3f}" for w, d in zip(WIDTHS, row)), flush=True)
        print(f"{'gguf:' + fmt:<12} worst {worst:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or FORMATS)
