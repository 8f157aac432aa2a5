"""Shared pieces of the powerful exactness checks (test_exactness_steps.py) and the
mutation check (test_mutations.py): sampling settings, an every-step controller, seeded
sampling through the public engine API, and a chi-square test that keeps cells unpooled
by testing each prefix's next-token distribution on its own."""

from __future__ import annotations

from scipy import stats

from specchat.engine import SamplingParams
from specchat.engine.gamma.controller import Assessment, Controller
from tests.support.batched import Case, Sampled, growing, sample

SETTINGS = {
    "t1": SamplingParams(temperature=1.0),
    "t0.7-topk5": SamplingParams(temperature=0.7, top_k=5),
    "t1.2-topp0.8": SamplingParams(temperature=1.2, top_p=0.8),
    "t0.9-topk6-topp0.9": SamplingParams(temperature=0.9, top_k=6, top_p=0.9),
}
GREEDY = SamplingParams(temperature=0.0)
ALL_SETTINGS = {**SETTINGS, "greedy": GREEDY}


class EveryStep(Controller):
    """γ on every step (no plain calibration steps): every step of a sample drafts, so a
    sample of L tokens holds several drafting steps with rollbacks between them.

    It predicts nothing for the panel (``assess``: an empty Assessment, as before anything
    is measured): γ is fixed, no test using it reads a step's predictions, and refitting
    the cost model to forecast every step was about a tenth of a sample's time. What the
    steps measured is still observed."""

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def choose(self, ids):
        return self.gamma, None

    def assess(self, k: int, source: str) -> Assessment:
        return Assessment()


def sample_counts(case: Case, prompt, params, samples, length) -> Sampled:
    """The seeded ``length``-token continuations of seeds 0..samples−1, one batch
    (tests/support/batched.py), with their counts and figures."""
    return sample(case, prompt, params, range(samples), length)


def planted_bug_caught(case: Case, prompt, params, samples, length, pvalue_of, alpha) -> tuple[bool, str]:
    """A planted-bug test's χ², looking at ``sample_counts``'s samples (the same seeds, in
    order) as they come: at 2/5, 3/5 and 4/5 of ``samples`` it stops, the bug caught, when
    ``pvalue_of(counts, n)`` < alpha / 1000, else at ``samples`` when p < alpha − 3 · alpha
    / 1000. An exact sampler (a plant that changed nothing) is "caught" with probability
    at most alpha (a union bound over the four looks), as by the single test at
    ``samples``; a bug that test caught with p below the final bound is caught here too
    (power lost: the chance of p in a window of 3 · alpha / 1000). (caught, where)."""
    looks = sorted({samples * k // 5 for k in (2, 3, 4)})
    look_alpha = alpha / 1000
    for n, sampled in growing(case, prompt, params, samples, length, looks + [samples]):
        if n in looks and (pvalue := pvalue_of(sampled.counts, n)) < look_alpha:
            return True, f"p = {pvalue:.3g} at {n} samples"
    pvalue = pvalue_of(sampled.counts, samples)
    return pvalue < alpha - len(looks) * look_alpha, f"p = {pvalue:.3g} at {samples} samples"


def tree_chi_square(counts: dict[tuple, int], next_laws, min_expected: float = 5.0) -> float:
    """p-value of the sequential chi-square test of ``counts`` (continuations → count)
    against the target's law; ``next_laws(prefixes)`` gives the exact next-token
    distribution ([V] floats) after each prefix (a tuple of continuation ids).

    Every prefix seen in the samples is a node: the counts of its next tokens are tested
    against its count × the exact conditional distribution, each next token with an
    expected count ≥ ``min_expected`` a cell of its own (the rest pooled per node, never
    across nodes). Given the node counts these tables are independent, so their Pearson
    statistics add up to a chi-square with the summed degrees of freedom (the chain-rule
    form of the joint test). Pooling per node keeps the cells a wrong residual or a wrong
    bonus row shows up in, at every position of the sample, not only the first. A token
    the target gives probability 0 fails at once (p = 0). Only the prefixes seen are
    evaluated, never the whole V^L joint."""
    node_counts: dict[tuple, dict[int, int]] = {}
    for seq, n in counts.items():
        for i in range(len(seq)):
            children = node_counts.setdefault(seq[:i], {})
            children[seq[i]] = children.get(seq[i], 0) + n
    prefixes = list(node_counts)
    laws = dict(zip(prefixes, next_laws(prefixes)))
    statistic, dof = 0.0, 0
    for prefix, observed in node_counts.items():
        law = laws[prefix]
        total = sum(observed.values())
        if any(law[token] == 0.0 for token in observed):
            return 0.0
        cells = []  # (observed, expected)
        rest_o, rest_e = 0, 0.0
        for token, pr in enumerate(law):
            if pr == 0.0:
                continue
            e, o = total * pr, observed.get(token, 0)
            if e >= min_expected:
                cells.append((o, e))
            else:
                rest_o, rest_e = rest_o + o, rest_e + e
        if rest_e >= min_expected or (rest_e > 0 and not cells):
            cells.append((rest_o, rest_e))
        elif cells and rest_e > 0:  # too small to stand alone: joins the smallest cell of this node
            i = min(range(len(cells)), key=lambda j: cells[j][1])
            cells[i] = (cells[i][0] + rest_o, cells[i][1] + rest_e)
        if len(cells) < 2:
            continue
        statistic += sum((o - e) ** 2 / e for o, e in cells)
        dof += len(cells) - 1
    return float(stats.chi2.sf(statistic, dof)) if dof else 1.0
