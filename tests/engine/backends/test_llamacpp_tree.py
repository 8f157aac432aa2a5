"""Trees of drafts on the llama.cpp backend, in one decode (engine/backends/llamacpp_tree.py),
on the real embedded SmolLM2 in F16.

* Every node's logits are the target's given the context and that node's ancestors:
  each row equals a chain decode of the node's path, within the format's fixed batch
  bound (F16: 0.1, near_tie.GGUF_NOISE_BOUND). Most rows are bit-equal; a node whose
  batch row or cell differs from the chain's moved by 0.012–0.03 here (its F32
  attention rounds differently, and the F16 cache rounds that again). Planted bug: every node in branch 0 (each then sees its elder siblings and
  their subtrees) moves rows by whole logits.
* After ``keep_path`` the cache is what a chain decode of the path leaves: the next
  token's logits equal those after a chain decode of the path within the batch bound
  (measured 0.0–0.031: the path's cells came from other rows of a larger batch), whichever
  branch was kept — the chain, a rival's subtree, or none; and a tree left unwalked is
  dropped by the next call. Planted bugs: the chain's cells
  kept under a rival's ids (logits move by whole units); a kept branch's nodes below
  the path left in the cache, and every node in branch 0 (llama.cpp refuses the next
  decode, which is asserted).
* Sampling through the tree is exact: the first two tokens at T = 0.8 with top-k and
  top-p, over 200 seeds (the tree's decode carrying the context's last 4 tokens too),
  against the joint enumerated from one-token steps (verify's χ²
  and TV rule, as test_batched_exact.py), with a point-mass tree whose chain and rivals
  are all often kept or rejected. Planted bug: logits asked for at every new context
  token but read as if at the last only fails it (40 seeds).
* Greedy with the shipped EAGLE-3 head drafting a chain and two rivals equals plain
  greedy up to near-ties (the format's bound), with rivals kept on the way.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

from specchat.engine import SamplingParams, SpeculativeEngine
import specchat.engine.backends.llamacpp_tree as llamacpp_tree
from specchat.engine.proposers import Proposal, Proposer
from specchat.engine.sampling import warp
from specchat.loading.gguf_tokenizer import GgufTokenizer
from specchat.verify.near_tie import GGUF_NOISE_BOUND
from specchat.verify.single import _exact_first_two, _pair_codes
from specchat.verify.stats import goodness_of_fit
from tests.support.mutations import mutant, patched
from tests.support.needs import embedded_llama_backend, needs_llama_cpp

pytestmark = needs_llama_cpp
PARAMS = SamplingParams(temperature=0.8, top_p=0.95, top_k=10)
SAMPLES = 200


@pytest.fixture(scope="module")
def backend():
    return embedded_llama_backend(max_ctx=2048, gguf_type="F16")


@pytest.fixture(scope="module")
def context(backend) -> list[int]:
    tokenizer = GgufTokenizer(backend.llm)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "List some fruits."}])
    return ids + tokenizer("Apples, bananas,", add_special_tokens=False)["input_ids"]


def ranked(backend, ids: list[int], n: int) -> list[int]:
    backend.reset()
    return torch.topk(backend.forward(ids)[-1], n).indices.tolist()


def a_tree(backend, ids: list[int]) -> tuple[list[int], tuple[int, ...]]:
    """A chain of 3 greedy tokens, the 2nd and 3rd likeliest first tokens beside it, and
    a child under the first rival: nodes 0-1-2 | 3-5 | 4."""
    first = ranked(backend, ids, 3)
    second = ranked(backend, ids + first[:1], 1)[0]
    third = ranked(backend, ids + [first[0], second], 1)[0]
    under_rival = ranked(backend, ids + [first[1]], 1)[0]
    return [first[0], second, third, first[1], first[2], under_rival], (-1, 0, 1, -1, -1, 3)


def path_to(parents, node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


ONE_BRANCH = lambda: patched(llamacpp_tree, "branches", mutant(llamacpp_tree.branches, [(  # noqa: E731
    "return [tuple(sorted(s)) for s in through], len(leaves)", "return [(0,) for s in through], 1")]))


@pytest.mark.parametrize("planted", [False, True], ids=["healthy", "every-node-in-branch-0"])
def test_every_node_sees_its_ancestors_only(backend, context, planted):
    tokens, parents = a_tree(backend, context)
    backend.reset()
    backend.forward(context)
    if planted:  # siblings at one position of one sequence: llama.cpp refuses the batch
        with ONE_BRANCH(), pytest.raises(RuntimeError, match="llama_decode failed"):
            backend.forward_tree(context, tokens, parents)
        return
    rows = backend.forward_tree(context, tokens, parents)  # the context's last token and the nodes
    backend.keep_path([])
    worst = 0.0
    for node in [-1, *range(len(tokens))]:
        path = [] if node < 0 else [tokens[i] for i in path_to(parents, node)]
        backend.reset()
        backend.forward(context)
        # the same kernels: the last token and the path as a batch, one more token after it
        want = backend.forward(context + path, extra=torch.tensor([tokens[0]]), num_logits=2)[0]
        worst = max(worst, float((rows[node + 1] - want).abs().max()))
    assert worst < GGUF_NOISE_BOUND[backend.precision], worst


KEEPS_BRANCH_0 = lambda: patched(llamacpp_tree.TreeLayout, "keep", mutant(llamacpp_tree.TreeLayout.keep, [(  # noqa: E731
    "b = self.seqs[path[-1]][0] if path else 0", "b = 0")]))


@pytest.mark.parametrize(("path", "planted"), [([], False), ([0], False), ([0, 1, 2], False), ([3], False),
                                               ([3, 5], False), ([4], False), ([3], True), ([3, 5], True)])
def test_the_cache_after_keep_path_is_a_chain_decodes(backend, context, path, planted):
    tokens, parents = a_tree(backend, context)
    kept = [tokens[i] for i in path]
    nxt = ranked(backend, context + kept, 1)[0]
    backend.reset()
    backend.forward(context)
    with KEEPS_BRANCH_0() if planted else contextlib.nullcontext():
        backend.forward_tree(context, tokens, parents)
        backend.keep_path(path)
    assert backend.ids == context + kept
    got = backend.forward(context + kept + [nxt])[-1]
    backend.reset()
    backend.forward(context)
    backend.forward(context + kept)  # the path as a batch, then one token
    want = backend.forward(context + kept + [nxt])[-1]
    gap = float((got - want).abs().max())
    if planted:
        assert gap > 10 * GGUF_NOISE_BOUND[backend.precision], gap
    else:  # the path's cells came from other rows of a larger batch (see the module's note)
        assert gap < GGUF_NOISE_BOUND[backend.precision], gap


def test_a_kept_branchs_deeper_nodes_left_behind_are_caught(backend, context):
    """Planted bug: ``keep`` skips dropping the kept branch below the path — the next
    decode then lands on a position that branch still holds, and llama.cpp refuses it."""
    tokens, parents = a_tree(backend, context)
    leaky = mutant(llamacpp_tree.TreeLayout.keep, [(
        "ok &= bool(llama_cpp.llama_memory_seq_rm(memory, b, end, -1))  # the kept branch below the path", "pass")])
    backend.reset()
    with patched(llamacpp_tree.TreeLayout, "keep", leaky), pytest.raises(RuntimeError, match="llama_decode failed"):
        backend.forward_tree(context, tokens, parents)
        backend.keep_path([0])
        backend.forward(context + tokens[:1] + [tokens[3]])
    backend.reset()


def test_a_tree_left_unwalked_is_dropped_by_the_next_call(backend, context):
    tokens, parents = a_tree(backend, context)
    nxt = ranked(backend, context + [tokens[3]], 1)[0]
    backend.reset()
    backend.forward(context)
    backend.forward_tree(context, tokens, parents)  # no keep_path: a step that stopped early
    got = backend.forward(context + [tokens[3], nxt], num_logits=2)
    backend.reset()
    backend.forward(context)
    assert torch.equal(got, backend.forward(context + [tokens[3], nxt], num_logits=2))


class ScriptedTree(Proposer):
    """Drafts one fixed tree (point masses) at the first step, nothing after."""

    kind = "scripted"
    point_mass = True

    def __init__(self, tokens: list[int], parents: tuple[int, ...], at: int) -> None:
        super().__init__(len(tokens))
        self.tokens, self.parents, self.at = tokens, parents, at

    def propose(self, ids, k, params, generator):
        if len(ids) != self.at:
            return Proposal(torch.empty(0, dtype=torch.long), None, source=self.kind)
        return Proposal(torch.tensor(self.tokens), None, source=self.kind, parents=self.parents)


# a plausible slip: logits asked for at every new context token, read as if at the last only
EVERY_HOST_ROW = lambda: patched(llamacpp_tree.TreeLayout, "rows", mutant(llamacpp_tree.TreeLayout.rows, [(  # noqa: E731
    "every, i == len(host) - 1)", "every, True)")]))


# context tokens the tree's decode carries (its "host" rows, which the planted bug misreads)
HOST = 4


@pytest.mark.parametrize("planted", [None, "logits-at-every-context-row"])
def test_sampling_through_a_tree_is_exact(backend, context, planted):
    """Each seed starts from a cache holding all but the context's last HOST tokens (the
    previous seed's tail rolled back by a one-token forward), so the tree's decode carries
    HOST context rows before its nodes — what the planted bug misreads — without a whole
    prefill per seed (a seed from an empty cache, carrying the whole prompt, cost ~3× more)."""
    assert len(context) > HOST + 1
    tokens, parents = a_tree(backend, context)
    backend.reset()
    p_first = warp(backend.forward(context), PARAMS)[0]
    joint = _exact_first_two(backend, context, PARAMS, p_first, sorted(backend.eos_token_ids))
    engine = SpeculativeEngine(backend, ScriptedTree(tokens, parents, len(context)), eos_token_ids=[])
    samples = 40 if planted else SAMPLES
    got = np.full((samples, 2), -1, dtype=np.int64)
    kept = [0] * len(tokens)
    backend.reset()
    with EVERY_HOST_ROW() if planted else contextlib.nullcontext():
        for seed in range(samples):
            backend.forward(context[:-HOST])
            assert backend.ids == context[:-HOST]  # the tree's decode starts HOST tokens back
            out = []
            for step in engine.generate(context, dataclasses.replace(PARAMS, seed=seed), max_new_tokens=2):
                out += [t.id for t in step.tokens]
            got[seed] = out[:2]
            for i in range(len(tokens)):
                kept[i] += out[:len(path_to(parents, i))] == [tokens[j] for j in path_to(parents, i)]
    check = goodness_of_fit("tree: first two tokens vs exact joint", _pair_codes(got, backend.vocab_size + 1), joint)
    if planted:
        assert not check.passed, check.line()
        return
    assert check.passed, check.line()
    assert min(kept[0], kept[3], kept[4], kept[5]) > 0 and kept[0] < SAMPLES, kept  # each branch walked, some rejected


@pytest.mark.parametrize("shape", ["first", "dynamic"])
def test_greedy_with_head_trees_equals_plain(backend, shape):
    from tests.engine.backends.test_llamacpp import CODE_PROMPT, greedy_divergences

    from specchat.engine.proposers.eagle import EagleProposer
    from specchat.heads.eagle3 import Eagle3Head
    from specchat.loading.heads import resolve_head

    folder = resolve_head("embedded:smollm2-135m-instruct-eagle3", None, None)
    head = Eagle3Head.load(folder, backend)
    tokenizer = GgufTokenizer(backend.llm)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": CODE_PROMPT}])
    proposer = EagleProposer(head, backend, 2 if shape == "first" else 3, siblings=3, tree=shape)
    divergences, accepted = greedy_divergences(backend, ids, proposer, 64)
    assert accepted > 0
    wide = [d for d in divergences if d["gap"] > d["tolerance"]]
    assert not wide, f"divergences beyond a near-tie: {wide} (all: {divergences})"


def test_final_hidden_states_follow_the_kept_path(context):
    """Medusa heads read the final hidden state at the last kept position: after a tree,
    the backend hands out the last context token's and the kept path's, as a chain decode
    of the path would (the same batch bound on the logits they give)."""
    backend = embedded_llama_backend(max_ctx=2048, gguf_type="F16")
    backend.request_final_hidden()
    tokens, parents = a_tree(backend, context)
    backend.reset()
    backend.forward(context)
    rows = backend.forward_tree(context, tokens, parents)
    assert backend.last_final_hidden.shape == (len(tokens) + 1, backend.hidden_size)
    backend.keep_path([3, 5])
    got, start = backend.last_final_hidden, backend.final_hidden_start
    assert start == len(context) - 1 and got.shape[0] == 3
    backend.reset()
    backend.forward(context[:-1])
    want = backend.forward(context + [tokens[3], tokens[5]], num_logits=3)  # the last token and the path
    assert backend.final_hidden_start == start
    embed = backend.token_embeddings()  # SmolLM2 ties its output projection to these
    gap = float((got @ embed.T - want).abs().max())
    assert gap < GGUF_NOISE_BOUND[backend.precision], gap
    assert float((rows[[0, 4, 6]] - want).abs().max()) < GGUF_NOISE_BOUND[backend.precision]


def test_greedy_with_a_medusa_tree_equals_plain(backend):
    from tests.engine.backends.test_llamacpp import CODE_PROMPT, greedy_divergences
    from tests.support.tiny_heads import random_medusa_head

    from specchat.engine.proposers.medusa import MedusaProposer

    backend.request_final_hidden()
    try:
        config = {"hidden_size": backend.hidden_size, "vocab_size": backend.vocab_size}
        head = random_medusa_head(config, num_heads=3, draft_vocab=4096, dtype=torch.float32)
        tokenizer = GgufTokenizer(backend.llm)
        ids = tokenizer.apply_chat_template([{"role": "user", "content": CODE_PROMPT}])
        proposer = MedusaProposer(head, backend, 3, siblings=3, tree="dynamic")
        divergences, _ = greedy_divergences(backend, ids, proposer, 48)
        wide = [d for d in divergences if d["gap"] > d["tolerance"]]
        assert not wide, f"divergences beyond a near-tie: {wide} (all: {divergences})"
        assert proposer.head is head
    finally:
        backend._final_hidden = False
