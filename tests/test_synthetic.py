"""``specchat plan --synthetic`` (specchat/synthetic.py): random-weight GGUFs in the shapes
of real models, timed here.

* The shapes are the real ones: their parameter counts are the published ones (Qwen3-8B
  8.19B, Qwen3-0.6B 0.60B, Llama-3.1-8B 8.03B, Llama-3.2-1B 1.24B), and the tensor bytes
  under llama.cpp's Q4_K_M rule and Q8_0 are the sizes of the published GGUF files (5.03,
  0.64, 4.92 and 1.32 GB) within 2 %: a wrong dimension or format mix moves them more.
* The tiny pair (a small shape of each architecture), built the same way, loads in
  llama.cpp, and made as transformers models it runs there too; ``plan``'s synthetic path
  times it on both backends and reports v(k) and c per context.
* Bad input is one line: an unknown pair, --contexts that is not a list of lengths.
"""

from __future__ import annotations

import pytest

from specchat.synthetic import LLAMA31_8B, LLAMA32_1B, QWEN3_06B, QWEN3_8B
from tests.support.needs import needs_llama_cpp

PUBLISHED = {QWEN3_8B: (8.19e9, 5.03e9), QWEN3_06B: (0.596e9, 0.639e9), LLAMA31_8B: (8.03e9, 4.92e9),
             LLAMA32_1B: (1.236e9, 1.32e9)}


@pytest.mark.parametrize("shape", list(PUBLISHED), ids=lambda s: s.name)
def test_the_shapes_are_the_published_models(shape):
    parameters, file_bytes = PUBLISHED[shape]
    assert shape.parameters() == pytest.approx(parameters, rel=0.005)
    assert shape.file_bytes() == pytest.approx(file_bytes, rel=0.02)


def test_the_q4_k_m_mix_gives_more_bits_where_llama_cpp_does():
    kinds = {name: kind for name, _, kind in QWEN3_8B.tensors()}
    assert kinds["output.weight"] == "Q6_K" and kinds["blk.10.attn_q.weight"] == "Q4_K"
    # 36 layers: the first and last 4, and every third from layer 4 on
    more = [i for i in range(36) if kinds[f"blk.{i}.ffn_down.weight"] == "Q6_K"]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]
    assert all(kinds[f"blk.{i}.attn_v.weight"] == kinds[f"blk.{i}.ffn_down.weight"] for i in range(36))


@needs_llama_cpp
def test_plan_times_a_synthetic_pair_on_llama_cpp(tmp_path, monkeypatch):
    from specchat.commands import plan

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    figures = plan.synthetic("tiny", (64, 128), repeats=1)
    assert_costs(figures, {"64", "128"})
    assert sorted(p.name for p in (tmp_path / "synthetic").iterdir()) == ["tiny-llama-Q8_0-v1.gguf",
                                                                          "tiny-qwen3-Q4_K_M-v1.gguf"]


def test_plan_times_a_synthetic_pair_on_transformers():
    """The GPU check's path (bfloat16 on CUDA there), on the CPU."""
    from specchat.commands import plan

    figures = plan.synthetic("tiny", (64,), repeats=1, backend="transformers", device="cpu")
    assert_costs(figures, {"64"})
    assert figures["target"] == "tiny-qwen3 bfloat16 (transformers)"


def test_plan_times_a_synthetic_nf4_target_on_transformers():
    """The GPU check's NF4 step (the qwen3-8b profile's 4-bit target beside a bfloat16 draft), on the CPU."""
    pytest.importorskip("bitsandbytes")
    from specchat.commands import plan
    from specchat.synthetic import PAIRS, transformers_model

    model = transformers_model(PAIRS["tiny"][0], "cpu", nf4=True)
    kinds = {type(m).__name__ for m in model.modules()}
    assert "Linear4bit" in kinds and type(model.lm_head).__name__ == "Linear"  # the head kept, as transformers keeps it
    figures = plan.synthetic("tiny", (64,), repeats=1, backend="transformers", device="cpu", nf4=True)
    assert_costs(figures, {"64"})
    assert figures["target"] == "tiny-qwen3 4bit-nf4/bfloat16 (transformers)"


def test_nf4_outside_a_synthetic_transformers_plan_is_one_line(capsys):
    from specchat.cli import main

    assert main(["plan", "--synthetic", "tiny", "--nf4"]) == 2  # llama.cpp: a GGUF has its own format
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--nf4" in err


def assert_costs(figures, contexts):
    assert set(figures["contexts"]) == contexts
    for f in figures["contexts"].values():
        assert len(f["v"]) == 9 and f["v"][0] == 1.0 and all(v > 0 for v in f["v"])
        assert f["draft_ms"] > 0 and f["c"] == pytest.approx(f["draft_ms"] / f["step_ms"][0])


def test_bad_input_is_one_line(capsys):
    from specchat.cli import main

    assert main(["plan", "--synthetic", "qwen3-8b", "--contexts", "256,lots"]) == 2
    err = capsys.readouterr().err
    assert "--contexts" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--synthetic", "gpt-5"])
    assert exit_.value.code == 2
