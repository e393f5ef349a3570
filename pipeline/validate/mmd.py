"""Maximum mean discrepancy (Gretton et al., JMLR 2012) with an RBF kernel.

    k(x, y) = exp(−‖x − y‖² / (2σ²))
    MMD²_u(X, Y) = 1/(m(m−1)) Σ_{i≠j} k(xᵢ, xⱼ) + 1/(n(n−1)) Σ_{i≠j} k(yᵢ, yⱼ) − 2/(mn) Σ_{i,j} k(xᵢ, yⱼ)

The unbiased estimator (Lemma 6 of Gretton et al.) can be slightly negative when the distributions
are equal. σ comes from the median heuristic: the median pairwise Euclidean distance of the pooled
sample. To make a *table* of MMDs comparable, `mmd_table` uses one σ for all pairs of a feature
space (the median over the union of every group) rather than one per pair. The p-value is a
permutation test of H₀: P_X = P_Y (labels of the pooled sample shuffled, σ kept fixed).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist, pdist

MEDIAN_SAMPLE = 2000  # points used to estimate the median distance of large samples


def median_bandwidth(*samples: np.ndarray, seed: int = 0) -> float:
    """σ = median pairwise Euclidean distance of the pooled samples (a random subset if large)."""
    z = np.concatenate([np.asarray(s, dtype=np.float64) for s in samples])
    if len(z) > MEDIAN_SAMPLE:
        z = z[np.random.default_rng(seed).choice(len(z), MEDIAN_SAMPLE, replace=False)]
    d = pdist(z)
    d = d[d > 0]
    return float(np.median(d)) if d.size else 1.0


def rbf_kernel(x: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
    return np.exp(-cdist(x, y, "sqeuclidean") / (2.0 * sigma * sigma))


def _mmd2_from_kernel(k: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """MMD²_u for each row of ``masks`` (P × N booleans: True = sample X) over the pooled kernel ``k``."""
    mx = masks.astype(np.float64)
    my = 1.0 - mx
    m = mx.sum(axis=1)
    n = my.sum(axis=1)
    diag = np.diag(k)
    kx, ky = k @ mx.T, k @ my.T  # N × P
    sxx = np.einsum("pn,np->p", mx, kx) - mx @ diag
    syy = np.einsum("pn,np->p", my, ky) - my @ diag
    sxy = np.einsum("pn,np->p", mx, ky)
    return sxx / (m * (m - 1)) + syy / (n * (n - 1)) - 2.0 * sxy / (m * n)


def mmd2_unbiased(x: np.ndarray, y: np.ndarray, sigma: float | None = None) -> float:
    """Unbiased MMD² between samples ``x`` (m × d) and ``y`` (n × d); σ by the median heuristic if None."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"MMD needs at least 2 samples per group, got {len(x)} and {len(y)}")
    sigma = median_bandwidth(x, y) if sigma is None else sigma
    z = np.concatenate([x, y])
    mask = np.zeros((1, len(z)), dtype=bool)
    mask[0, : len(x)] = True
    return float(_mmd2_from_kernel(rbf_kernel(z, z, sigma), mask)[0])


def mmd_test(x: np.ndarray, y: np.ndarray, sigma: float | None = None, *, permutations: int = 500,
             seed: int = 0) -> dict[str, float]:
    """MMD²_u, MMD = √max(MMD²_u, 0), σ and the permutation p-value (1 + #{MMD²_π ≥ MMD²}) / (1 + P)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"MMD needs at least 2 samples per group, got {len(x)} and {len(y)}")
    sigma = median_bandwidth(x, y, seed=seed) if sigma is None else sigma
    z = np.concatenate([x, y])
    k = rbf_kernel(z, z, sigma)
    observed = np.zeros((1, len(z)), dtype=bool)
    observed[0, : len(x)] = True
    mmd2 = float(_mmd2_from_kernel(k, observed)[0])
    p_value = math.nan
    if permutations > 0:
        rng = np.random.default_rng(seed)
        null = []
        for start in range(0, permutations, 100):  # batches bound the N × P work arrays
            count = min(100, permutations - start)
            masks = np.zeros((count, len(z)), dtype=bool)
            for i in range(count):
                masks[i, rng.permutation(len(z))[: len(x)]] = True
            null.append(_mmd2_from_kernel(k, masks))
        p_value = float((1 + np.sum(np.concatenate(null) >= mmd2)) / (1 + permutations))
    return {"mmd2": mmd2, "mmd": math.sqrt(max(mmd2, 0.0)), "sigma": sigma, "p_value": p_value,
            "n_x": len(x), "n_y": len(y), "permutations": permutations}


def mmd_table(groups: dict[str, np.ndarray], *, permutations: int = 500, seed: int = 0) -> dict[str, Any]:
    """MMD of every pair of groups with one shared median-heuristic σ (so the entries are comparable)."""
    sigma = median_bandwidth(*groups.values(), seed=seed)
    pairs = {}
    for a, b in itertools.combinations(groups, 2):
        pairs[f"{a}|{b}"] = mmd_test(groups[a], groups[b], sigma, permutations=permutations, seed=seed)
    return {"kernel": "rbf: k(x, y) = exp(-||x - y||^2 / (2 sigma^2))",
            "bandwidth": {"sigma": sigma, "rule": "median pairwise Euclidean distance over the union of all groups"},
            "estimator": "unbiased MMD^2_u (Gretton et al. 2012, Lemma 6); mmd = sqrt(max(MMD^2_u, 0))",
            "permutations": permutations, "pairs": pairs}


def gaussian_mmd2(mean_shift: float | np.ndarray, dim: int, std: float, sigma: float) -> float:
    """Population MMD² between N(μ₁, s²I_d) and N(μ₂, s²I_d) for the RBF kernel of bandwidth σ.

    E k(X, X') = (σ² / (σ² + 2s²))^{d/2}; E k(X, Y) = the same × exp(−‖μ₁ − μ₂‖² / (2(σ² + 2s²))), so
    MMD² = 2 (σ² / (σ² + 2s²))^{d/2} (1 − exp(−‖Δμ‖² / (2(σ² + 2s²)))).
    """
    delta2 = float(np.sum(np.square(mean_shift)))
    c = (sigma**2 / (sigma**2 + 2 * std**2)) ** (dim / 2)
    return 2.0 * c * (1.0 - math.exp(-delta2 / (2 * (sigma**2 + 2 * std**2))))
