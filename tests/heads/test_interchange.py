"""A head trained here drafts in a real llama-server, converted by llama.cpp's own script.

The head specchat ships for the embedded SmolLM2 (trained by ``specchat train-head``)
is converted with the vendored ``convert_hf_to_gguf.py --target-model-dir`` and served
by ``llama-server -md head.gguf --spec-type draft-eagle3`` beside the same BF16 target
file specchat runs in-process. On the same prompt ids at temperature 0 with chains of
3, llama-server's accepted/drafted (its own ``timings``) must be within 0.1 of
specchat's — a head layout, layer convention or position shift that differed between
the two would make the counts part (they were equal, prompt by prompt, when measured).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from tests.support.folded import FoldedEngine
from tests.support.llama_server_helpers import Server, server_dir
from tests.support.needs import LLAMA_SERVER_NOT_BUILT, llama_cpp

BIN = server_dir()
pytestmark = pytest.mark.skipif(BIN is None or llama_cpp is None, reason=LLAMA_SERVER_NOT_BUILT)

PROMPTS = ["Why is the sky blue?", "Write a short story about a fox and a crow."]
GAMMA = 3
TOKENS = 48


def convert_script():
    from specchat.bench.peer_llama_server import convert_script as beside

    script = beside(BIN)
    if script is None:
        pytest.fail(f"llama.cpp's convert_hf_to_gguf.py is not beside {BIN} (make llama-server unpacks it)")
    return script


def eagle3_profile():
    """smollm2-eagle3 on one llama.cpp thread (llama-server peers take the same count): a
    thread per core waits on the other test workers' at every op; no check here reads a
    figure that depends on it."""
    from specchat.config import load_profile

    return load_profile("smollm2-eagle3").replace(target={"n_threads": 1})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from specchat.loading import load_models
    from specchat.loading.embedded import ensure_embedded_model
    from specchat.loading.heads import SHIPPED

    loaded = load_models(eagle3_profile())
    head = loaded.head
    folder = SHIPPED / "smollm2-135m-instruct-eagle3"
    gguf = tmp_path_factory.mktemp("head") / "head.gguf"
    script = convert_script()
    result = subprocess.run([sys.executable, str(script), str(folder), "--target-model-dir",
                             str(ensure_embedded_model()), "--outfile", str(gguf), "--outtype", "bf16"],
                            capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(script.parent / "gguf-py"), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    return loaded, head, gguf


def in_process(loaded, head, ids):
    from tests.support.power import EveryStep
    from specchat.engine import SamplingParams
    from specchat.engine.proposers.eagle import EagleProposer

    backend = loaded.target
    backend.reset()
    engine = FoldedEngine(backend, EagleProposer(head, backend, GAMMA), controller=EveryStep(GAMMA))
    out = [t.id for s in engine.generate(ids, SamplingParams(temperature=0.0), max_new_tokens=TOKENS) for t in s.tokens]
    m = engine.metrics
    return out, m.num_draft_tokens, m.num_accepted_tokens


def completion(url, ids):
    body = json.dumps({"prompt": ids, "n_predict": TOKENS, "temperature": 0.0, "cache_prompt": False}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/completion", body), timeout=120) as r:
        reply = json.loads(r.read())
    return reply["tokens"] if "tokens" in reply else None, reply["timings"]["draft_n"], reply["timings"]["draft_n_accepted"]


def test_a_head_saved_here_drafts_in_llama_server_as_it_does_in_process(setup, tmp_path):
    loaded, head, gguf = setup
    target_file = loaded.target.model_path
    server = Server(BIN / "llama-server", ["-m", target_file, "-md", str(gguf), "--spec-type", "draft-eagle3",
                                           "--spec-draft-n-max", str(GAMMA), "--spec-draft-p-min", "0", "-t", "1",
                                           "-c", "2048", "-np", "1"], tmp_path / "server.log")
    try:
        ours, theirs = [0, 0], [0, 0]
        for text in PROMPTS:
            ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}])
            _, drafted, accepted = in_process(loaded, head, ids)
            ours = [ours[0] + drafted, ours[1] + accepted]
            _, drafted, accepted = completion(server.url, ids)
            theirs = [theirs[0] + drafted, theirs[1] + accepted]
    finally:
        server.stop()
    assert theirs[0] > 0 and theirs[1] > 0, f"llama-server's eagle3 counters did not move: {theirs}"
    assert ours[0] > 0 and ours[1] > 0
    ratio_ours, ratio_theirs = ours[1] / ours[0], theirs[1] / theirs[0]
    assert abs(ratio_ours - ratio_theirs) <= 0.1, (ours, theirs)


def test_bench_has_llama_server_rows_plain_and_with_the_same_head(setup):
    """`bench`'s peer:eagle3 row: llama-server started with the profile's head, converted by
    llama.cpp's own script and cached; it answers the request's ids and its counters move.
    Its peer:none (llama-server, stock kernels) row: the same server without a head, which at T=0 gives
    the same tokens and drafts nothing."""
    from types import SimpleNamespace

    from specchat.bench.configs import BenchConfig
    from specchat.bench.peer_llama_server import LlamaServerPeer, plain_unavailable, unavailable
    from specchat.engine import SamplingParams

    loaded, head, _ = setup
    profile = eagle3_profile()
    assert unavailable(loaded, profile) is None and plain_unavailable(loaded) is None
    peer = LlamaServerPeer(loaded, profile, stops=set(), head_folder=head.folder)
    try:
        ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": PROMPTS[0]}])
        request, greedy = SimpleNamespace(ids=ids, seed=0), SamplingParams(temperature=0.0)
        row = peer.run(BenchConfig("eagle3", 3, "peer"), request, greedy, 24)
        plain = peer.run(BenchConfig("none", 0, "peer", server=True), request, greedy, 24)
        assert len(peer._servers) == 2  # one server with the head, one without
    finally:
        peer.close()
    assert row.new_tokens == 24 and len(row.output_ids) == 24
    assert row.server_drafted > 0 and row.server_accepted > 0, row
    assert plain.output_ids == row.output_ids and not plain.server_drafted, plain
    assert peer._servers == {}  # close stopped them


def test_a_llama_server_that_will_not_start_is_one_line(setup, tmp_path):
    """A target file llama-server cannot load (here: garbage whose name holds an escape)
    ends the bench with one clean line naming it, not a traceback."""
    from types import SimpleNamespace

    from specchat.bench.configs import BenchConfig
    from specchat.bench.peer_llama_server import LlamaServerPeer
    from specchat.engine import SamplingParams
    from specchat.errors import SpecchatError

    loaded, head, _ = setup
    peer = LlamaServerPeer(loaded, eagle3_profile(), stops=set(), head_folder=head.folder)
    bad = tmp_path / "bad\x1b]0;x\x07.gguf"
    bad.write_bytes(b"not a gguf")
    peer.model_path = str(bad)
    try:
        with pytest.raises(SpecchatError) as error:
            peer.run(BenchConfig("eagle3", 2, "peer"), SimpleNamespace(ids=[1, 2, 3], seed=0),
                     SamplingParams(temperature=0.0), 4)
    finally:
        peer.close()
    text = str(error.value)
    assert "llama-server exited" in text and "\n" not in text and "\x1b" not in text
