"""The GPU paths (issue 44): run on a CUDA GPU by ``make test-gpu`` and
``scripts/gpu-check.sh``; on a machine without one they skip, each saying why.
``scripts/gpu-check.sh --cpu`` (SPECCHAT_GPU_CHECK=cpu) runs the same tests on the CPU,
so their logic is checked where no GPU is lent.

* a draft model on the device: greedy speculative = plain greedy (up to a near-tie of the
  format), and T > 0 sampling keeps the target's exact law (χ² against the enumerated joint);
* the transformers backend with a 4-bit NF4 target (bitsandbytes' kernels on the device);
* an EAGLE-3 head drafting trees (4D masks on the device), greedy = plain;
* llama.cpp with every layer offloaded (a CUDA build of llama-cpp-python);
* step times from CUDA events: positive, and the draft and verify parts within the step.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from scipy import stats

from specchat.engine import DraftModelProposer, SamplingParams, SpeculativeEngine
from specchat.verify.near_tie import near_tie_tolerance
from tests.support.vocab16 import exact_joint, perturbed, tiny_lm

pytestmark = pytest.mark.gpu
GREEDY = SamplingParams(temperature=0.0)
PROMPT = [1, 2, 3, 4]
ALPHA = 1e-3  # false-alarm rate of the χ² check


@pytest.fixture(scope="module")
def device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("SPECCHAT_GPU_CHECK") == "cpu":
        return "cpu"  # scripts/gpu-check.sh --cpu: the same steps on the CPU
    pytest.skip("no CUDA GPU here (torch.cuda.is_available() is False): make test-gpu or "
                "scripts/gpu-check.sh runs these on a machine with one")


def pair(device: str, dtype=torch.float32):
    target = tiny_lm(0).to(device=device, dtype=dtype)
    return target, perturbed(tiny_lm(0), 1).to(device=device, dtype=dtype)


def greedy(engine, prompt=PROMPT, n: int = 24) -> list[int]:
    engine.reset()
    return [t.id for s in engine.generate(prompt, GREEDY, n) for t in s.tokens]


def same_or_near_tie(logits_at, got: list[int], want: list[int], precision: str) -> str | None:
    """None when equal, or when they part where the target's top two logits (``logits_at(k)``:
    after ``want[:k]``) are within the format's rounding (a batched verify and a one-token
    forward may round apart)."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if at is None:
        return None if len(got) == len(want) else f"lengths {len(got)} and {len(want)}"
    top = torch.topk(logits_at(at).float(), 2).values.tolist()
    bound = near_tie_tolerance(precision, top[0])
    return None if top[0] - top[1] <= bound else f"parts at token {at}, top-two gap {top[0] - top[1]:.3g} > {bound:.3g}"


def model_logits(model, prompt: list[int], want: list[int]):
    def at(k: int) -> torch.Tensor:
        with torch.inference_mode():
            return model(input_ids=torch.tensor([prompt + want[:k]], device=model.device)).logits[0, -1]
    return at


def backend_logits(backend, prompt: list[int], want: list[int]):
    def at(k: int) -> torch.Tensor:
        backend.reset()
        return backend.forward(prompt + want[:k])[-1]
    return at


def test_a_draft_model_on_the_device_replies_as_plain_greedy(device):
    target, draft = pair(device)
    plain = greedy(SpeculativeEngine(target, None))
    spec = greedy(SpeculativeEngine(target, DraftModelProposer(draft, 3)))
    assert same_or_near_tie(model_logits(target, PROMPT, plain), spec, plain, "float32") is None


def test_sampling_on_the_device_keeps_the_targets_law(device):
    target, draft = pair(device, torch.float64)
    params = SamplingParams(temperature=0.9, top_k=6)
    engine = SpeculativeEngine(target, DraftModelProposer(draft, 3))
    samples = 1500
    counts: dict[tuple, int] = {}  # seed by seed through the real engine on the device (the batched
    for seed in range(samples):    # runner of tests/support/batched.py reads laws from host tables)
        drawn = tuple(t.id for s in engine.generate(PROMPT, dataclasses.replace(params, seed=seed), 3)
                      for t in s.tokens)[:3]
        counts[drawn] = counts.get(drawn, 0) + 1
    joint = exact_joint(target.cpu(), PROMPT, 3, params)
    big = [s for s, p in joint.items() if p * samples >= 5]
    observed = [counts.get(s, 0) for s in big] + [samples - sum(counts.get(s, 0) for s in big)]
    expected = [joint[s] * samples for s in big] + [samples - sum(joint[s] * samples for s in big)]
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_step_times_come_from_the_devices_clock(device):
    target, draft = pair(device)
    steps = [s.stats for s in SpeculativeEngine(target, DraftModelProposer(draft, 3)).generate(PROMPT, GREEDY, 16)]
    drafted = [s for s in steps if s.num_draft_tokens]
    assert drafted and all(s.verify_ms > 0 and s.draft_ms > 0 for s in drafted)
    assert all(s.draft_ms + s.verify_ms <= s.total_ms * 1.001 + 1e-3 for s in steps)


def test_an_eagle3_head_drafting_trees_on_the_device_replies_as_plain_greedy(device):
    from specchat.engine.backends.transformers import TransformersBackend
    from specchat.engine.proposers.eagle import EagleProposer
    from tests.support.tiny_heads import random_eagle3_head

    model = tiny_lm(0).to(device=device, dtype=torch.float32)
    target = TransformersBackend(model)
    head = random_eagle3_head(model, dtype=torch.float32)
    plain = greedy(SpeculativeEngine(target, None))
    spec = greedy(SpeculativeEngine(target, EagleProposer(head, target, 3, siblings=3, tree="dynamic")))
    assert same_or_near_tie(model_logits(model, PROMPT, plain), spec, plain, "float32") is None


def test_a_4bit_nf4_target_with_a_draft_replies_as_plain_greedy(device, tmp_path, _tiny_tokenizer):
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed")
    from specchat.config import load_profile
    from specchat.engine.factory import build_proposer
    from specchat.loading import load_models
    from tests.support.tiny_models import build_tiny_model, write_tiny_profile

    target_dir = build_tiny_model(tmp_path / "t", seed=0, hidden=64, tokenizer=_tiny_tokenizer, head_scale=4.0)
    draft_dir = build_tiny_model(tmp_path / "d", seed=1, num_layers=1, hidden=64, tokenizer=_tiny_tokenizer)
    path = write_tiny_profile(tmp_path / "nf4.toml", target_dir, draft_dir, quantization="4bit-nf4")
    path.write_text(path.read_text().replace('device = "cpu"', f'device = "{device}"'))
    profile = load_profile(str(path))
    loaded = load_models(profile)
    assert loaded.target.precision.startswith("4bit") and loaded.target.device.type == device
    prompt = list(loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True))
    plain = greedy(SpeculativeEngine(loaded.target, None), prompt)
    spec = greedy(SpeculativeEngine(loaded.target, build_proposer(profile.speculation, loaded)), prompt)
    assert same_or_near_tie(backend_logits(loaded.target, prompt, plain), spec, plain, loaded.target.precision) is None


def test_llama_cpp_with_every_layer_offloaded_replies_as_plain_greedy(device):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    if device == "cuda" and not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python was built without GPU offload: scripts/gpu-check.sh builds one with "
                    "CUDA when its source is at hand")
    from specchat.engine import NgramProposer
    from specchat.engine.backends.llamacpp import LlamaCppBackend
    from specchat.loading.embedded import find_gguf
    from specchat.loading.gguf_tokenizer import GgufTokenizer

    backend = LlamaCppBackend(find_gguf(), n_ctx=1024, n_gpu_layers=-1 if device == "cuda" else 0)
    ids = GgufTokenizer(backend.llm).apply_chat_template(
        [{"role": "user", "content": "Repeat after me three times: the quick brown fox."}])
    plain = [t.id for s in SpeculativeEngine(backend, None).generate(ids, GREEDY, 32) for t in s.tokens]
    backend.reset()
    spec = [t.id for s in SpeculativeEngine(backend, NgramProposer(3, 1, 3)).generate(ids, GREEDY, 32)
            for t in s.tokens]
    assert same_or_near_tie(backend_logits(backend, ids, plain), spec, plain, backend.precision) is None
