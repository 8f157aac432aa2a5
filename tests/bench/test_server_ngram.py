"""bench's llama-server n-gram rows (issue 43): one row per n-gram ``--spec-type`` the
built llama-server lists in its ``--help``, each its own server, held against ours."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specchat.bench.configs import BenchConfig, build_configs
from specchat.bench.row import BenchRow
from specchat.bench.stats import vs_plain_peers
from tests.support.needs import LLAMA_SERVER_NOT_BUILT, llama_cpp


def test_each_ngram_type_is_a_row_where_ngram_is_compared():
    names = [c.name for c in build_configs(["ngram"], ["auto"], False, True, peer_methods=("none", "ngram"),
                                           server_peer=True, server_ngram_types=("ngram-simple", "ngram-mod"))]
    assert names == ["none", "ngram γ=auto", "peer:none", "peer:none (llama-server, stock kernels)",
                     "peer:ngram-simple (llama-server, stock kernels)", "peer:ngram-mod (llama-server, stock kernels)",
                     "peer:ngram γ=auto"]
    # no n-gram row of ours, no llama-server n-gram rows
    names = [c.name for c in build_configs(["draft_model"], [3], True, True, server_peer=True,
                                           server_ngram_types=("ngram-simple",))]
    assert not any("ngram" in n for n in names)


def test_ours_is_held_against_each_llama_server_row():
    def row(config, ms):
        return BenchRow(set="s", prompt_id="p", config=config, runner="peer" if ":" in config else "specchat",
                        method="none" if "none" in config else "ngram", new_tokens=100, wall_ms=ms)

    rows = [row("ngram γ=auto", 1000.0), row("peer:none (llama-server, stock kernels)", 1300.0),
            row("peer:ngram-mod (llama-server, stock kernels)", 1200.0), row("peer:ngram γ=auto", 1500.0)]
    ratios = vs_plain_peers(rows)["ngram γ=auto"]
    assert set(ratios) == {"peer:none (llama-server, stock kernels)", "peer:ngram-mod (llama-server, stock kernels)"}
    assert ratios["peer:ngram-mod (llama-server, stock kernels)"]["ratio"] == pytest.approx(1.2)


def test_every_listed_ngram_type_runs_and_keeps_greedy_output():
    """Each n-gram type's server answers a repetitive greedy request with the plain
    server's tokens, and at least one of them drafts (its counters move)."""
    from specchat.bench.peer_llama_server import LlamaServerPeer, ngram_types, plain_unavailable, server_bin_dir
    from specchat.config import load_profile
    from specchat.engine import SamplingParams
    from specchat.loading import load_models

    if llama_cpp is None or server_bin_dir() is None:
        pytest.skip(LLAMA_SERVER_NOT_BUILT)
    types = ngram_types()
    assert {"ngram-simple", "ngram-mod"} <= set(types), types  # what 0.3.36's llama.cpp lists
    profile = load_profile("default").replace(target={"n_threads": 1})
    loaded = load_models(profile)
    assert plain_unavailable(loaded) is None
    text = "Repeat this list exactly three times: apple, banana, cherry, grape, lemon, mango, peach, plum."
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    request, greedy = SimpleNamespace(ids=ids, seed=0, fresh=True), SamplingParams(temperature=0.0)
    peer = LlamaServerPeer(loaded, profile, stops=set())
    try:
        plain = peer.run(BenchConfig("none", 0, "peer", server=True), request, greedy, 48)
        rows = {t: peer.run(BenchConfig("ngram", "auto", "peer", server=True, spec_type=t), request, greedy, 48)
                for t in types}
        assert len(peer._servers) == 1 + len(types)
    finally:
        peer.close()
    for spec_type, row in rows.items():
        assert row.output_ids == plain.output_ids, spec_type
    assert any(row.server_drafted for row in rows.values()), {t: r.server_drafted for t, r in rows.items()}


def test_ngram_mod_drafts_from_its_own_chat_only():
    """ngram-mod's table outlives a request (it hashes every request into one table), so a
    greedy question asked again would be drafted from the first asking's reply. Bench's
    rows are chats of their own: a new chat gets a new server, a follow-up turn keeps it.
    Planted: without the restart the second asking drafts its memorised reply (≥ 48 more)."""
    from specchat.bench.peer_llama_server import LlamaServerPeer, server_bin_dir
    from specchat.config import load_profile
    from specchat.engine import SamplingParams
    from specchat.loading import load_models

    if llama_cpp is None or server_bin_dir() is None:
        pytest.skip(LLAMA_SERVER_NOT_BUILT)
    profile = load_profile("default").replace(target={"n_threads": 1})
    loaded = load_models(profile)
    text = "Write a short story about a lighthouse keeper who finds a message in a bottle."
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    greedy, config = SamplingParams(temperature=0.0), BenchConfig("ngram", "auto", "peer", server=True, spec_type="ngram-mod")
    peer = LlamaServerPeer(loaded, profile, stops=set())
    try:
        first, again = (peer.run(config, SimpleNamespace(ids=ids, seed=0, fresh=True), greedy, 160) for _ in range(2))
        server = peer._servers[(0, "ngram-mod")]
        peer.run(config, SimpleNamespace(ids=ids + first.output_ids[:4], seed=0, fresh=False), greedy, 8)
        assert peer._servers[(0, "ngram-mod")] is server  # the same chat's next turn: same server
    finally:
        peer.close()
    assert again.output_ids == first.output_ids
    assert len(first.output_ids) > 24 + 48  # long enough that a memorised reply would be drafted
    assert again.server_drafted == first.server_drafted


def test_server_ngram_picks_of_the_offered_types_and_names_a_wrong_one():
    from specchat.commands.bench import server_ngram
    from specchat.errors import SpecchatError

    offered = ("ngram-simple", "ngram-map-k", "ngram-cache")
    assert server_ngram(None, offered) == offered
    assert server_ngram("none", offered) == ()
    assert server_ngram("ngram-cache, ngram-simple", offered) == ("ngram-cache", "ngram-simple")
    with pytest.raises(SpecchatError) as bad:
        server_ngram("ngram-typo", offered)
    assert "ngram-typo" in str(bad.value) and "\n" not in str(bad.value)
