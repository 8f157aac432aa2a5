"""llama.cpp settings that once aborted the process (GGML_ASSERT over the TUI) or
allocated gigabytes before failing: each is one line and exit 2, through the real CLI
and the real embedded GGUF, or runs."""

from __future__ import annotations

import json
import os

import pytest

from tests.engine.backends.test_llamacpp import write_profile
from tests.support.cli import assert_one_line_error, in_process, run_cli
from tests.support.needs import needs_llama_cpp

pytestmark = needs_llama_cpp

# Q4_1 as shipped (no gguf_type): nothing to convert, loads in about a second
BODY = '''
record = false
[target]
source = "embedded:smollm2-135m-instruct"
backend = "llama.cpp"
{target}
[speculation]
method = "ngram"
[sampling]
temperature = 0
max_new_tokens = 2
'''


def profile(tmp_path, **target) -> str:
    lines = "\n".join(f"{key} = {value}" for key, value in target.items())
    return str(write_profile(tmp_path, BODY.format(target=lines)))


@pytest.mark.parametrize("n_ctx", [1, 16, 32, 200, 2**31])
def test_a_context_that_fits_no_turn_or_no_memory_is_one_line(tmp_path, n_ctx):
    path = profile(tmp_path, n_ctx=n_ctx)
    assert_one_line_error(run_cli("profiles", "check", path), "target.n_ctx", "between 256 and 1,048,576")
    assert_one_line_error(run_cli("run", "--profile", path, "--prompt", "hi"), "target.n_ctx", "between 256")


def test_a_context_far_beyond_the_trained_one_is_refused_before_allocating(tmp_path):
    """SmolLM2 was trained on 8,192 tokens: 100,000 is refused at load, in one line."""
    result = run_cli("run", "--profile", profile(tmp_path, n_ctx=100_000), "--prompt", "hi")
    assert_one_line_error(result, "target.n_ctx = 100,000", "8,192", "at most 32,768")


def test_a_prompt_longer_than_the_batch_llama_cpp_kept_runs_and_one_past_the_context_is_one_line(tmp_path):
    """n_ctx 300: llama.cpp pads the context to 512 but clamps its batch to 300, so a
    400-token prompt used to abort on GGML_ASSERT(n_tokens_all <= cparams.n_batch). One
    thread: the batch clamp does not depend on it, and a thread per core waits on the
    other workers' at every op of the 400-token prefill."""
    path = profile(tmp_path, n_ctx=300, n_threads=1)
    result = run_cli("run", "--profile", path, "--json", "--prompt", "word " * 380)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["num_tokens"] >= 1 and summary["models"]["target"]["n_ctx"] == 512
    result = run_cli("run", "--profile", path, "--prompt", "word " * 600)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("specchat: error")]
    assert len(errors) == 1 and "fills the model's context window" in errors[0], result.stderr


def test_more_threads_than_cpus_are_clamped_with_one_line(tmp_path):
    """In this process (in_process): what main prints is the point, not the process."""
    result = in_process("run", "--profile", profile(tmp_path, n_threads=1000), "--json", "--prompt", "hi")
    assert result.returncode == 0, result.stderr[-2000:]
    cpus = len(os.sched_getaffinity(0))
    assert f"target.n_threads = 1000 is more than the {cpus} CPUs" in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["models"]["target"]["n_threads"] == cpus
