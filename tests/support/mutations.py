"""Planted bugs, applied in-process by swapping the real functions for mutants.

A mutant is built from the current source of the real function: one exact piece of
text is replaced (and must occur exactly once, so a refactor that moves it fails the
check loudly instead of silently testing nothing), the result is compiled in the
function's own module namespace, and every loaded specchat module that holds the
original is pointed at the mutant for the duration of a ``with`` block."""

from __future__ import annotations

import contextlib
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

import torch

import specchat.engine.backends.transformers as transformers_backend
import specchat.engine.host_sampling as host_sampling
import specchat.engine.proposers.base as proposers
import specchat.engine.sampling as sampling


@contextlib.contextmanager
def patched(owner: object, name: str, replacement: object):
    """owner.name = replacement, and the same for every specchat module that imported it."""
    original = getattr(owner, name)
    holders = [(owner, name)]
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("specchat") and module is not owner:
            for attr, value in list(vars(module).items()):
                if value is original:
                    holders.append((module, attr))
    for holder, attr in holders:
        setattr(holder, attr, replacement)
    try:
        yield
    finally:
        for holder, attr in holders:
            setattr(holder, attr, original)


def mutant(function: Callable, edits: list[tuple[str, str]]) -> Callable:
    """``function`` recompiled from its source with each (old, new) text replaced once."""
    source = textwrap.dedent(inspect.getsource(function))
    for old, new in edits:
        assert source.count(old) == 1, f"mutation site {old!r} not found once in {function.__qualname__}"
        source = source.replace(old, new)
    namespace = dict(function.__globals__)
    exec(compile(source, f"<mutant of {function.__qualname__}>", "exec"), namespace)
    return namespace[function.__name__]


def _left_padded(probs: torch.Tensor, vocab: int) -> torch.Tensor:
    width = probs.shape[-1]
    if width >= vocab:
        return probs[..., :vocab]
    return torch.nn.functional.pad(probs, (vocab - width, 0))  # zeros in front: every id shifted


def shifted_rows(forward: Callable, only_with_drafts: bool = False) -> Callable:
    """A backend's ``forward`` with a planted fault: on a call for several rows of logits
    (a verification), every row gets the previous position's logits (the first repeated);
    with ``only_with_drafts``, only when drafts are passed (``extra``)."""
    def wrong(self, ids, extra=None, num_logits=1):
        logits = forward(self, ids, extra, num_logits)
        if num_logits > 1 and (not only_with_drafts or (extra is not None and extra.numel() > 0)):
            logits = torch.cat([logits[:1], logits[:-1]])
        return logits

    return wrong


@dataclass(frozen=True)
class Mutation:
    name: str
    description: str
    plant: Callable[[], contextlib.AbstractContextManager]
    settings: tuple[str, ...]  # the sampling settings the bug changes the output in


SAMPLED = ("t1", "t0.7-topk5", "t1.2-topp0.8", "t0.9-topk6-topp0.9")
FILTERED = ("t0.7-topk5", "t1.2-topp0.8", "t0.9-topk6-topp0.9")
EVERY = SAMPLED + ("greedy",)

MUTATIONS = [
    Mutation("resample-from-p", "after a rejection, draw from p instead of norm(max(p − q, 0))",
             lambda: patched(sampling, "residual_distribution", lambda p, q: p),
             SAMPLED),  # greedy: the residual of one-hot p and q is p itself
    Mutation("q-without-top-k/top-p", "the draft samples from the filtered q but reports q with temperature only",
             lambda: patched(proposers.DraftModelProposer, "propose", mutant(proposers.DraftModelProposer.propose, [(
                 "qs.append(on_vocab(q, vocab))",
                 "qs.append(on_vocab(warp(logits[:, :vocab], __import__('dataclasses').replace("
                 "params, top_k=0, top_p=1.0)), vocab))")])),
             FILTERED),
    Mutation("no-kv-rollback", "rejected drafts stay in the target's KV cache (ids bookkeeping still dropped)",
             lambda: patched(transformers_backend.TransformersBackend, "_roll_back", mutant(
                 transformers_backend.TransformersBackend._roll_back,
                 [("self.cache.crop(-drop)", "self.cache.crop(0)")])),
             EVERY),
    Mutation("bonus-from-wrong-row", "the bonus token is drawn from p of the first position, not of the last",
             lambda: patched(sampling, "rejection_sample", mutant(sampling.rejection_sample, [
                 ("p[k:]], dim=0)", "p[:1]], dim=0)"),
                 ("Verdict(own[:k] == drafts, own,", "Verdict(own[:k] == drafts, torch.cat([own[:k], own[:1]]),")])),
             EVERY),
    Mutation("inverted-acceptance", "a draft is kept with probability min(1, q/p) instead of min(1, p/q)",
             lambda: patched(sampling, "rejection_sample", mutant(sampling.rejection_sample, [
                 ("accepted = u * q_draft < p_draft", "accepted = u * p_draft < q_draft")])),
             EVERY),
    Mutation("padded-vocab-q-misaligned", "a smaller draft vocabulary's q is padded at the front, shifting its ids",
             lambda: patched(proposers, "on_vocab", _left_padded),
             SAMPLED),  # greedy: one-hot q; a misaligned q only makes more drafts look rejectable
    Mutation("host-nucleus-inclusive-cumsum", "the numpy sampler's nucleus counts a token's own mass as above it",
             lambda: patched(host_sampling, "nucleus", mutant(host_sampling.nucleus, [
                 ("above = np.cumsum(ordered, dtype=np.float64) - ordered", "above = np.cumsum(ordered, dtype=np.float64)")])),
             ("t1.2-topp0.8", "t0.9-topk6-topp0.9")),
    Mutation("host-top-k-one-short", "the numpy sampler's top-k keeps the k−1 most likely tokens",
             lambda: patched(host_sampling, "top_k", mutant(host_sampling.top_k, [
                 ("    for width in NEAR:", "    k -= 1\n    for width in NEAR:")])),
             ("t0.7-topk5", "t0.9-topk6-topp0.9")),
    Mutation("host-p-not-renormalised", "the numpy sampler reports p before renormalising over the kept tokens",
             lambda: patched(host_sampling, "support", mutant(host_sampling.support, [
                 ("rows.append((ids, kept / kept.sum()))", "rows.append((ids, kept / total))"),
                 ("rows.append((ids, w / w.sum()))", "rows.append((ids, w / total))")])),
             ("t1.2-topp0.8", "t0.9-topk6-topp0.9")),  # top-k alone: the total is the kept tokens' mass
    Mutation("host-draw-mirrored", "the numpy sampler draws with 1 − u: the same law, another token for a seed",
             lambda: patched(host_sampling, "verify_point_mass", mutant(host_sampling.verify_point_mass, [
                 ("j = draw(probs, u)", "j = draw(probs, 1.0 - u)")])),
             SAMPLED),
]


def leaky_residual(residual_distribution: Callable, mass: float = 1e-4) -> Callable:
    """A residual norm(max(p − q, 0)) with a planted error of ``mass``: that much probability
    moved from each row's likeliest residual token to the likeliest other token of p (where
    the residual may be 0: the error is then mass outside the residual's support, but never
    on a token p forbids). The first token's law is then off by mass · P(reject) in TV — 1e-5
    at a 10 % rejection rate, which no sampled check at verify's sizes can see."""
    def leaky(p, q):
        residual = residual_distribution(p, q).clone()
        source = residual.argmax(-1, keepdim=True)  # [k, 1]
        destination = p.scatter(-1, source, float("-inf")).argmax(-1, keepdim=True)  # [k, 1]
        moved = residual.gather(-1, source).clamp(max=mass)
        residual.scatter_add_(-1, source, -moved)
        residual.scatter_add_(-1, destination, moved)
        return residual

    return leaky
