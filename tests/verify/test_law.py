"""``specchat verify``'s exact-law check (specchat/verify/law.py): the law of the first
token the sampler's own code emits, read over its uniforms on the backend's p and q, against
p. It passes on the engine as written, on transformers and llama.cpp, at the temperatures
verify runs (greedy included), and it fails on errors no sample at verify's sizes can see:
1e-4 of the residual's mass moved between two tokens (planted through tests/support/mutations.py,
as verify's other planted-bug tests do), a keep test off by 1e-4, an inverse CDF off by 1e-4
in torch or in the numpy host sampler. Nothing here samples: no false alarms."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import specchat.engine.host_sampling as host_sampling
from specchat.engine.sampling import SamplingParams, warp
import specchat.engine.sampling as sampling
from specchat.verify.law import LAW_BOUND, MAX_IDS, healthy_tv, law_checks, read_law
from tests.engine.test_host_sampling import chat_like
from tests.support.mutations import leaky_residual, mutant, patched
from tests.support.needs import LLAMA_CPP_NOT_BUILT
from tests.verify.test_verify import PARAMS, SAMPLES, YES_NO, peaked  # noqa: F401 (peaked: a fixture)

SETTINGS = {
    "default": SamplingParams(temperature=0.6, top_p=0.9),  # the default profile's
    "t1": SamplingParams(temperature=1.0),  # the whole vocabulary: cut to MAX_IDS ids
    "topk40": SamplingParams(temperature=0.7, top_k=40),
    "topk50-topp0.95": SamplingParams(temperature=1.3, top_k=50, top_p=0.95),
    "greedy": SamplingParams(temperature=0.0),
}


def rows(params: SamplingParams, seed: int = 1):
    """Target logits and p [V], and a draft's q [V] on SmolLM2's vocabulary: a close draft's
    (the logits plus noise), which keeps 89-93 % in each setting, has drafts with 0 < p < q
    (where the keep test decides) and a residual over two tokens or more (where the draw
    after a rejection decides) — so each planted bug below changes the law."""
    logits = chat_like(seed, rows=1)[0]
    draft = logits + 0.3 * torch.randn(logits.shape, generator=torch.Generator().manual_seed(seed + 1))
    return logits, warp(logits[None], params)[0], warp(draft[None], params)[0]


def every_path(params: SamplingParams, seed: int = 1):
    """The draft path's check, then the point-mass paths' (torch, numpy host), on one pair of rows."""
    logits, p, q = rows(params, seed)
    return law_checks(logits, p, q, None, params) + law_checks(logits, p, None, int(q.argmax()), params)


def test_the_reading_is_exact_on_a_known_inverse_cdf():
    """read_law recovers a law with masses from 0.5 down to 1e-9 (far narrower than a first
    cell of 1/128, wider than the finest of 2^-32) to within 2^-32 per change of token."""
    law = torch.tensor([0.5, 1e-9, 0.2, 0.0, 3e-6, 0.1, 1e-9, 0.2 - 3e-6 - 2e-9], dtype=torch.float64)
    cdf = law.cumsum(0)
    read, uniforms = read_law(lambda lane, u: torch.searchsorted(cdf, u, right=True).clamp(max=7), 1, 8)
    assert (read[0] - law).abs().sum() < 8 * 2.0**-32
    assert uniforms < 129 + 6 * 32  # a first grid, then about one halving per change and round


def test_the_bound_sits_above_any_healthy_reading():
    """The check's bound is ≥ 2× what float32 rounding can show on the widest support read
    (healthy_tv: derived from u and the support's size, not read off one CPU)."""
    assert healthy_tv(MAX_IDS + 1) < LAW_BOUND / 2


@pytest.mark.parametrize("setting", SETTINGS)
def test_every_path_passes_well_within_the_bound_on_the_engine(setting):
    """Healthy: the TV each reading measures is float32 rounding, within healthy_tv."""
    checks = every_path(SETTINGS[setting])
    assert len(checks) == 3
    for check in checks:
        assert check.passed and check.extra["tv"] < healthy_tv(check.extra["ids"]), check.line()
        assert f"within the bound {LAW_BOUND:g}" in check.line() and "uniforms" in check.line()
    if setting == "t1":  # temperature alone: every id has mass, so the rows are cut
        assert all(c.extra["restricted"] and "cut to its 128 likeliest" in c.detail for c in checks)


def test_a_wide_support_is_read_in_bounded_time():
    """The costliest reading (a draft's q and p over MAX_IDS ids, every draft rejectable at
    half of them) stays near 10^5 uniforms: ~0.1 s on one CPU core."""
    check = every_path(SETTINGS["t1"])[0]
    assert check.extra["ids"] == MAX_IDS and check.extra["uniforms"] < 200_000, check.line()


# (name, planted bug, the paths it changes)
MILD = [
    ("residual off by 1e-4", lambda: patched(sampling, "residual_distribution",
                                             leaky_residual(sampling.residual_distribution)), {"draft q"}),
    ("keep test off by 1e-4", lambda: patched(sampling, "rejection_sample", mutant(sampling.rejection_sample, [
        ("accepted = u * q_draft < p_draft", "accepted = u * q_draft * (1 + 1e-4) < p_draft")])), {"draft q"}),
    ("inverse CDF off by 1e-4", lambda: patched(sampling, "sample_at", mutant(sampling.sample_at, [
        ("[:, None] * total  # [n, 1]", "[:, None] * total * (1 - 1e-4)")])), {"draft q", "torch"}),
    ("host inverse CDF off by 1e-4", lambda: patched(host_sampling, "draw", mutant(host_sampling.draw, [
        ("total = cdf[-1]\n        target = min(u * total,",
         "total = cdf[-1]\n        target = min(u * total * (1 - 1e-4),")])),
     {"host"}),
]


@pytest.mark.parametrize("name, plant, paths", MILD, ids=[m[0] for m in MILD])
@pytest.mark.parametrize("setting", ["default", "topk50-topp0.95", "t1"])
def test_a_mild_sampler_bug_fails_the_paths_it_changes(name, plant, paths, setting):
    with plant():
        checks = every_path(SETTINGS[setting])
    for check in checks:
        changed = any(path in check.name for path in paths)
        assert check.passed != changed, check.line()
        if changed:
            assert f"exceeds the bound {LAW_BOUND:g}; largest error at token" in check.detail, check.line()


def test_verify_fails_on_a_residual_off_by_1e_4_and_only_its_exact_law_sees_it(peaked):
    """Through verify itself on the tiny peaked pair (a draft model: q at every draft):
    healthy, every check passes; with 1e-4 of the residual's mass moved, the exact-law
    check fails, naming the token, and every sampled check still passes — at these sizes
    they cannot see it (nor could they at any size verify would run)."""
    profile, loaded = peaked
    run = dict(samples=SAMPLES // 4, tokens=2, params=PARAMS, gamma=3, **YES_NO)
    healthy = verify_report(loaded, profile, **run)
    law = next(c for c in healthy.checks if c.name.startswith("exact law"))
    assert "draft q" in law.name and law.passed and law.extra["tv"] < healthy_tv(law.extra["ids"]), law.line()
    assert healthy.passed, "\n".join(c.line() for c in healthy.checks)
    with patched(sampling, "residual_distribution", leaky_residual(sampling.residual_distribution)):
        planted = verify_report(loaded, profile, **run)
    failed = [c for c in planted.checks if not c.passed]
    assert [c.name for c in failed] == [law.name], "\n".join(c.line() for c in planted.checks)
    assert failed[0].extra["tv"] > LAW_BOUND and "largest error at token" in failed[0].detail, failed[0].line()


def verify_report(loaded, profile, **kwargs):
    from specchat.verify.single import verify

    return verify(loaded, profile, **kwargs)


def law_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip()[4:].lstrip().startswith("exact law of")]


def test_the_printed_report_names_the_largest_error(capsys, tiny_profile_path):
    """The CLI's report (transformers): the check's line with its bound, its TV and "exact law
    over N uniforms"; on the planted residual, FAIL with the token, expected and got."""
    from specchat.cli import main

    args = ["verify", "--profile", str(tiny_profile_path), "--samples", "50", "--tokens", "2", "--temperature", "0.7"]
    main(args)
    out = capsys.readouterr().out
    [line] = law_lines(out)
    assert line.startswith("PASS") and f"within the bound {LAW_BOUND:g}" in line and "exact law over" in line, line
    assert "exact law: the first token's law read off the sampler's own code" in out
    with patched(sampling, "residual_distribution", leaky_residual(sampling.residual_distribution)):
        assert main(args) == 1
    out = capsys.readouterr().out
    [line] = law_lines(out)
    assert line.startswith("FAIL") and f"exceeds the bound {LAW_BOUND:g}" in line, line
    assert "largest error at token" in line and "expected" in line and "got" in line and "exact law over" in line
    assert "verdict: FAIL" in out


@pytest.fixture(scope="module")
def llama_rows(tmp_path_factory):
    """The default profile's model (embedded SmolLM2 on llama.cpp, n-gram lookup): its logits
    at verify's first candidate prompt, taken through the backend seam as verify takes them."""
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_NOT_BUILT)
    from specchat.verify.single import DEFAULT_CANDIDATES
    from specchat.config import load_profile
    from specchat.engine import SpeculativeEngine
    from specchat.engine.session import ChatSession
    from specchat.loading import load_models

    path = tmp_path_factory.mktemp("profiles") / "llama.toml"
    path.write_text('extends = "default"\n[target]\nbackend = "llama.cpp"\nn_threads = 1\nn_ctx = 1024\n')
    profile = load_profile(str(path))
    loaded = load_models(profile)
    prompt, reply_start = DEFAULT_CANDIDATES[0]
    chat = ChatSession(SpeculativeEngine(loaded.target, None), loaded.tokenizer)
    ids = chat.prompt_ids([{"role": "user", "content": prompt}])
    ids += list(loaded.tokenizer(reply_start, add_special_tokens=False)["input_ids"])
    return profile, loaded.target.forward(ids)[0]


@pytest.mark.parametrize("temperature", [None, 1.0, 0.0], ids=["profile-T", "T=1", "T=0"])
def test_on_llama_cpp_rows_the_engine_passes_and_a_leaky_residual_fails(llama_rows, temperature):
    """The rows verify reads on llama.cpp: n-gram drafts (the coupled draw, in torch and in
    numpy) pass; so does a draft whose law is the same model's at T = 0.8 with top-k 40 (a q
    unlike p in both directions, so the residual takes part), and it fails with 1e-4 of the
    residual moved."""
    from specchat.engine.factory import sampling_params

    profile, logits = llama_rows
    params = sampling_params(profile.sampling)
    params = params if temperature is None else dataclasses.replace(params, temperature=temperature)
    p = warp(logits[None], params)[0]
    q = warp(logits[None], SamplingParams(temperature=0.8, top_k=40))[0]
    checks = law_checks(logits, p, None, int(p.argmax()), params) + law_checks(logits, p, q, None, params)
    assert [c.passed for c in checks] == [True, True, True], "\n".join(c.line() for c in checks)
    assert all(c.extra["tv"] < healthy_tv(c.extra["ids"]) for c in checks), "\n".join(c.line() for c in checks)
    if params.greedy:
        return  # a greedy step draws no residual
    with patched(sampling, "residual_distribution", leaky_residual(sampling.residual_distribution)):
        [check] = law_checks(logits, p, q, None, params)
    assert not check.passed and check.extra["tv"] > LAW_BOUND, check.line()

