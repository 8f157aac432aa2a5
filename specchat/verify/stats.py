"""Statistical comparisons for ``specchat verify``. Sequences are integer codes (one per
distinct K-token continuation); distributions are dicts code → probability. A check fails
when its χ² p-value is below ``ALPHA`` or its TV exceeds ``tv_threshold`` (a false alarm
about 0.1 % + 0.1 % of the time); the rule and its power: docs/design/verify.md."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ALPHA = 1e-3
NULL_QUANTILE = 99.9
NULL_DRAWS = 1000
MIN_EXPECTED = 5.0  # goodness of fit: cells with a smaller expected count are pooled
MIN_POOLED = 10  # two-sample: cells with fewer observations in both samples together are pooled
SEED = 20240229


@dataclass
class Check:
    name: str
    passed: bool
    tv: float | None = None
    tv_threshold: float | None = None
    p_value: float | None = None
    cells: int = 0
    detail: str = ""
    extra: dict = field(default_factory=dict)
    power: float | None = None  # χ² rule's power against ``power_against`` (docs/design/verify.md)
    power_against: str = ""
    power_scale: float | None = None  # the smallest fraction of that bug's error caught with 90 % power

    def line(self) -> str:
        parts = [f"{'PASS' if self.passed else 'FAIL'}  {self.name}"]
        if self.tv is not None:
            parts.append(f"TV {self.tv:.4f} (threshold {self.tv_threshold:.4f})")
        if self.p_value is not None:
            parts.append(f"χ² p = {self.p_value:.3g} over {self.cells} cells (fail below {ALPHA:g})")
        if self.power is not None:
            mildest = (f", 90 % down to {self.power_scale:.2g}× that error" if self.power_scale is not None
                       and self.power_scale < 1 else "")
            parts.append(f"power {self.power:.2f} against {self.power_against}{mildest}")
        if self.detail:
            parts.append(self.detail)
        return " · ".join(parts)


def chi2_sf(statistic: float, dof: int) -> float:
    from scipy.stats import chi2

    return float(chi2.sf(statistic, dof)) if dof > 0 else 1.0


def _counts(codes: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(codes, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def tv_distance(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def goodness_of_fit(name: str, codes: np.ndarray, exact: dict[int, float], *,
                    bug: tuple[str, dict[int, float]] | None = None) -> Check:
    """Samples (codes) against an exact distribution; mass outside ``exact`` (if it does
    not sum to 1) is one "other" cell. ``bug``: (its name, its exact law over the same
    codes), to report the check's power against it."""
    n = len(codes)
    other_mass = max(0.0, 1.0 - sum(exact.values()))
    observed = _counts(codes)
    other_obs = sum(c for k, c in observed.items() if k not in exact)
    keys = [k for k, p in exact.items() if p * n >= MIN_EXPECTED]
    pooled_p = other_mass + sum(p for k, p in exact.items() if p * n < MIN_EXPECTED)
    pooled_o = other_obs + sum(observed.get(k, 0) for k, p in exact.items() if p * n < MIN_EXPECTED)
    expected = [exact[k] * n for k in keys]
    obs = [observed.get(k, 0) for k in keys]
    if pooled_p * n > 0:
        expected.append(pooled_p * n)
        obs.append(pooled_o)
    elif pooled_o:  # samples where the exact distribution puts no mass: impossible for an exact sampler
        return Check(name, False, cells=len(keys), detail=f"{pooled_o} samples fall where p = 0")
    stat = float(sum((o - e) ** 2 / e for o, e in zip(obs, expected)))
    p_value = chi2_sf(stat, len(expected) - 1)
    # TV over the exact cells plus one "other" cell, as the simulated null measures it
    empirical = {k: observed.get(k, 0) / n for k in exact}
    tv = tv_distance({**empirical, "other": other_obs / n}, {**exact, "other": other_mass})
    threshold = _tv_null_exact(exact, n)
    check = Check(name, p_value >= ALPHA and tv <= threshold, tv, threshold, p_value, len(expected))
    if bug is not None:
        against, law = bug
        cells_bug = [law.get(k, 0.0) for k in keys]
        if pooled_p * n > 0:
            cells_bug.append(max(0.0, 1.0 - sum(cells_bug)))
        check.power, check.power_scale = chi2_power([e / n for e in expected], cells_bug, n)
        check.power_against = against
    return check


def chi2_power(exact: list[float], bug: list[float], n: int) -> tuple[float, float | None]:
    """(power, scale): the χ² rule's power at ``n`` samples when the cells' true
    probabilities are ``bug`` instead of ``exact``, and the smallest fraction ε of that
    error (exact + ε (bug − exact)) caught with 90 % power (None: no error to catch)."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2

    dof = len(exact) - 1
    shift = n * sum((b - e) ** 2 / e for e, b in zip(exact, bug))  # λ at ε = 1
    if dof < 1 or shift < 1e-9:  # no error the cells can show (rounding aside)
        return 0.0, None
    critical = chi2.isf(ALPHA, dof)
    power = float(ncx2.sf(critical, dof, shift))
    needed = brentq(lambda lam: ncx2.sf(critical, dof, lam) - 0.9, 1e-9, 1e7)  # λ for 90 % power
    return power, float(np.sqrt(needed / shift))  # λ grows as ε²


def _tv_null_exact(exact: dict[int, float], n: int) -> float:
    probs = np.array(list(exact.values()) + [max(0.0, 1.0 - sum(exact.values()))])
    probs = probs / probs.sum()
    rng = np.random.default_rng(SEED)
    draws = rng.multinomial(n, probs, size=NULL_DRAWS) / n  # [D, cells]
    tvs = 0.5 * np.abs(draws - probs).sum(axis=1)
    return float(np.percentile(tvs, NULL_QUANTILE))


def two_sample(name: str, a: np.ndarray, b: np.ndarray) -> Check:
    """Two samples of codes from the same distribution? χ² contingency over the cells with
    ≥ MIN_POOLED observations in both samples together (the rest pooled into one cell),
    and TV against the permutation null."""
    from scipy.stats import chi2_contingency

    ca, cb = _counts(a), _counts(b)
    keys = sorted(set(ca) | set(cb))
    big = [k for k in keys if ca.get(k, 0) + cb.get(k, 0) >= MIN_POOLED]
    rest = [k for k in keys if ca.get(k, 0) + cb.get(k, 0) < MIN_POOLED]
    table = [[ca.get(k, 0) for k in big], [cb.get(k, 0) for k in big]]
    if rest:
        table[0].append(sum(ca.get(k, 0) for k in rest))
        table[1].append(sum(cb.get(k, 0) for k in rest))
    if len(table[0]) >= 2:
        p_value = float(chi2_contingency(np.array(table)).pvalue)
    else:
        p_value = 1.0  # a single cell: both samples are the same point mass
    tv = tv_distance({k: c / len(a) for k, c in ca.items()}, {k: c / len(b) for k, c in cb.items()})
    threshold = _tv_null_permutation(a, b)
    return Check(name, p_value >= ALPHA and tv <= threshold, tv, threshold, p_value, len(table[0]))


def _tv_null_permutation(a: np.ndarray, b: np.ndarray) -> float:
    pooled = np.concatenate([a, b])
    _, labels = np.unique(pooled, return_inverse=True)
    cells = labels.max() + 1
    rng = np.random.default_rng(SEED)
    tvs = np.empty(NULL_DRAWS)
    for i in range(NULL_DRAWS):
        perm = rng.permutation(labels)
        ha = np.bincount(perm[: len(a)], minlength=cells) / len(a)
        hb = np.bincount(perm[len(a):], minlength=cells) / len(b)
        tvs[i] = 0.5 * np.abs(ha - hb).sum()
    return float(np.percentile(tvs, NULL_QUANTILE))
