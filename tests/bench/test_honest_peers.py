"""Honest peers (issue 57, item 4): every llama.cpp peer row says whose kernels ran it.
llama-server's rows run llama.cpp's stock kernels: bench starts it with
SPECCHAT_GGML_UPSTREAM=1, so a build that carries our patches runs them off. llama-cpp-python
runs in bench's own process, so its rows run this process's kernels, ours, and say so.

Planted bugs: the server started without the variable (the real servers' environments lack
it); llama-cpp-python's rows named without their kernels, or as stock; peer:eagle3 (a
llama-server row) as this process's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from specchat.bench.configs import PLAIN_PEERS, BenchConfig, build_configs, process_kernels, ran_kernels
from specchat.bench.row import BenchRow
from specchat.bench.stats import vs_plain_peers
from tests.support.llama_server_helpers import server_dir

OURS = "specchat's kernels"


def test_each_llama_cpp_peer_row_names_whose_kernels_ran_it():
    configs = build_configs(["ngram", "eagle3"], [2], False, True, peer_methods=("none", "ngram", "eagle3"),
                            peer_models=("/models/other.Q8_0.gguf",), has_head=True, server_peer=True,
                            server_ngram_types=("ngram-simple",), kernels="specchat")
    assert {c.name: ran_kernels(c, "specchat") for c in configs} == {
        "none": "specchat", "ngram γ=2": "specchat", "eagle3 γ=2": "specchat",
        f"peer:none ({OURS})": "specchat", f"peer:none (other.Q8_0.gguf, {OURS})": "specchat",
        "peer:none (llama-server, stock kernels)": "stock", "peer:ngram-simple (llama-server, stock kernels)": "stock",
        f"peer:ngram γ=2 ({OURS})": "specchat", "peer:eagle3 γ=2 (stock kernels)": "stock"}


def test_a_stock_process_says_stock_and_a_transformers_peer_says_nothing():
    stock = [c.name for c in build_configs(["ngram"], [2], False, True, peer_methods=("none", "ngram"), kernels="stock")]
    assert stock == ["none", "ngram γ=2", "peer:none (stock kernels)", "peer:ngram γ=2 (stock kernels)"]
    plain = [c.name for c in build_configs(["ngram"], [2], False, True, peer_methods=("none", "ngram"))]
    assert plain == ["none", "ngram γ=2", "peer:none", "peer:ngram γ=2"]  # transformers' generate: no llama.cpp


@pytest.mark.parametrize("kernel, here", [("specchat", "specchat"), ("upstream", "stock"),
                                          ("upstream (SPECCHAT_GGML_UPSTREAM)", "stock"), (None, None)])
def test_this_process_kernels_are_what_the_loader_found(kernel, here):
    target = {} if kernel is None else {"llama_cpp_kernel": kernel}  # None: a transformers target
    assert process_kernels(SimpleNamespace(info={"target": target})) == here


def test_every_plain_peer_is_a_baseline_whatever_its_kernels():
    # the ratios against plain peers (and RESULTS.md's "× llama.cpp plain") find it by name
    for name in PLAIN_PEERS:
        rows = [BenchRow(set="s", prompt_id="p", config=c, runner=r, method="none", new_tokens=100, wall_ms=ms)
                for c, r, ms in (("none", "specchat", 1000.0), (name, "peer", 1100.0))]
        assert vs_plain_peers(rows)["none"][name]["ratio"] == pytest.approx(1.1)
    assert BenchConfig("none", 0, "peer", kernels="specchat").name in PLAIN_PEERS


def test_llama_server_peers_start_on_stock_kernels(monkeypatch):
    """The single and the concurrent llama-server peer, each started for real on the
    embedded GGUF: the variable that turns our patches off is in the server's environment,
    though not in ours."""
    from specchat.bench.peer_llama_server import LlamaServerPeer
    from specchat.bench.peer_server_concurrent import ConcurrentServerPeer
    from specchat.loading.embedded import find_gguf

    gguf = find_gguf()
    if server_dir() is None or gguf is None:
        pytest.skip("llama-server not built (make llama-server), or the embedded GGUF is missing")
    monkeypatch.delenv("SPECCHAT_GGML_UPSTREAM", raising=False)
    target = SimpleNamespace(model_path=gguf, n_threads=1, max_length=256, n_gpu_layers=0)
    loaded = SimpleNamespace(target=target, draft=None)
    profile = SimpleNamespace(speculation=SimpleNamespace(max_speculative_tokens=4, prompt_lookup_max=3))
    single, concurrent = LlamaServerPeer(loaded, profile, set()), ConcurrentServerPeer(loaded, profile, set())
    try:
        for server in (single._server(0), concurrent._serving("none", 2)):
            environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
            # this variable alone: a failure must not print the rest of the environment
            assert [e for e in environ if e.startswith(b"SPECCHAT_GGML_UPSTREAM=")] == [b"SPECCHAT_GGML_UPSTREAM=1"]
    finally:
        single.close()
        concurrent.close()
