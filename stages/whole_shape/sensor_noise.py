"""LiDAR-like range- and angle-dependent noise with per-point σ/μ labels (ModelNet40-E, released dataset_generator.py).

Models how a real scanner would have measured the shape. Per shape: a sensor on a sphere of radius
2 (azimuth ~ U(0, 2π), elevation ~ U(−45°, 45°)) and parameters a, b, c, k, q ~ U over the level's
ranges (paper Table 1). Per point: ray v = p − s, range r = ‖v‖, unit ray û; the normal n is the
eigenvector of the smallest eigenvalue of the covariance of the k = 10 nearest neighbours (the point
itself included; unoriented); cos θ = |û·n|;

    σ = (a + b·r)·(1 + c·(1 − cos θ)),  μ = k·(1 − cos θ),  ε ~ N(μ, σ²),  p' = p + ε·û.

With probability q a point is replaced by a uniform sample of the box [−0.5, 0.5]³ (tagged
``SYNTHETIC``; its σ and μ keep their analytic values, as the released generator); the other points
are tagged ``JITTER``. σ and μ are written as the per-point columns ``sigma`` and ``mu``; the sensor
position and the drawn a, b, c, k, q go to ``info``. Normals are computed for all points at once
(exact grid k-NN search and 3×3 covariances in numba, closed-form smallest eigenvectors in NumPy; no
per-point Python loop), once per shape: they are cached on the frame (``Frame.derived``) and shared by its
three severities. They are the same bytes as the KD-tree version they replaced (`pca_normals`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.kernels.grid_knn import knn_all
from bench_build.stages.registry import stage

MAX_NEIGHBORS = 128  # one pairwise-summation block of NumPy: the covariance sums copy its order exactly


@dataclass(frozen=True)
class SensorNoiseParams:
    a: tuple[float, float]  # range-independent σ term (units of the shape), U(lo, hi) per shape
    b: tuple[float, float]  # σ growth per unit range
    c: tuple[float, float]  # incidence-angle amplification of σ
    k: tuple[float, float]  # bias μ at grazing incidence
    q: tuple[float, float]  # outlier probability
    sensor_radius: float = 2.0
    max_elevation_deg: float = 45.0
    neighbors: int = 10
    outlier_half_width: float = 0.5  # outliers ~ U(−w, w)³


def pca_normals(xyz: np.ndarray, neighbors: int) -> np.ndarray:
    """Unit normals (N×3): smallest-eigenvalue eigenvector of each point's k-NN covariance.

    The same bytes as querying scipy's ``cKDTree(xyz, balanced_tree=False, compact_nodes=False)`` for the
    k nearest and summing the centred products with NumPy (what this function did up to stage version 2),
    ≈ 2–3× faster: the k + 1 nearest of every point come from an exact grid search (`kernels.grid_knn.knn_all`,
    sorted by distance); a row whose k + 1 distances hold a tie or near-tie (where the KD-tree's own order,
    or its rounding, decides) is answered by the KD-tree itself; the covariances are summed in numba in
    NumPy's order (`_neighbourhood_covariances`); the eigenvectors are NumPy's closed form."""
    if not 1 <= neighbors <= MAX_NEIGHBORS:
        raise ValueError(f"sensor_noise: neighbors must be 1…{MAX_NEIGHBORS}, got {neighbors}")
    xyz = np.ascontiguousarray(xyz, dtype=np.float64)
    n = len(xyz)
    k = min(neighbors, n)
    if n == 0:
        return np.empty((0, 3))
    idx, d2 = knn_all(xyz, k + 1)
    tied = _near_ties(d2, 1e-12 * float(np.abs(xyz).max()) ** 2)
    if tied.any():
        from scipy.spatial import cKDTree  # lazy: scipy costs ≈ 0.3 s to import and only this path needs it

        tree = cKDTree(xyz, balanced_tree=False, compact_nodes=False)
        idx[tied, :k] = np.asarray(tree.query(xyz[tied], k=k)[1]).reshape(-1, k)
    return smallest_eigenvectors(_neighbourhood_covariances(xyz, idx, k))


def smallest_eigenvectors(cov: np.ndarray) -> np.ndarray:
    """Unit eigenvector of the smallest eigenvalue of each symmetric 3×3 matrix (M×3×3 → M×3).

    Closed form (trigonometric eigenvalues, then the largest cross product of two rows of A − λI), ≈ 2×
    faster than batched ``eigh``; rows where the two smallest eigenvalues are (nearly) equal, so the
    direction is ill-conditioned, fall back to ``eigh``. The arithmetic runs in numba in the operation order
    of the NumPy version it replaced; arccos and cos stay NumPy's (SIMD on some CPUs: numba's libm could
    round differently), so the bytes are the same."""
    cov = np.ascontiguousarray(cov, dtype=np.float64)
    p, q, half_det = _eigen_terms(cov)
    phi = np.arccos(np.clip(half_det, -1.0, 1.0)) / 3.0
    v, bad = _eigen_vectors(cov, p, q, np.cos(phi), np.cos(phi + 2.0 * np.pi / 3.0))
    if bad.any():
        v[bad] = np.linalg.eigh(cov[bad])[1][:, :, 0]
    return v


@numba.njit(cache=True)
def _eigen_terms(cov):
    """Per matrix: p (√ of the deviatoric norm / 6), q (trace / 3) and det((A − qI) / p) / 2."""
    n = cov.shape[0]
    p, q, half_det = np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):
        a, b, c = cov[i, 0, 0], cov[i, 1, 1], cov[i, 2, 2]
        d, e, f = cov[i, 0, 1], cov[i, 0, 2], cov[i, 1, 2]
        qi = (a + b + c) / 3.0
        pi = math.sqrt(((a - qi) * (a - qi) + (b - qi) * (b - qi) + (c - qi) * (c - qi)
                        + 2.0 * (d * d + e * e + f * f)) / 6.0)
        ps = pi if pi > 0 else 1.0
        aq, bq, cq = (a - qi) / ps, (b - qi) / ps, (c - qi) / ps
        dp, ep, fp = d / ps, e / ps, f / ps
        det = aq * (bq * cq - fp * fp) - dp * (dp * cq - fp * ep) + ep * (dp * fp - bq * ep)
        p[i], q[i], half_det[i] = pi, qi, det / 2.0
    return p, q, half_det


@numba.njit(cache=True)
def _eigen_vectors(cov, p, q, cos_max, cos_min):
    """The unit cross product of largest norm among the rows of A − λ_min·I, and the rows to hand to eigh
    (λ_mid − λ_min ≤ 1e-6·|λ_max|, or all cross products zero)."""
    n = cov.shape[0]
    v = np.empty((n, 3))
    bad = np.zeros(n, np.bool_)
    m = np.empty((3, 3))
    cr = np.empty((3, 3))
    for i in range(n):
        lam_max = q[i] + 2.0 * p[i] * cos_max[i]
        lam_min = q[i] + 2.0 * p[i] * cos_min[i]
        lam_mid = 3.0 * q[i] - lam_max - lam_min
        for r in range(3):
            for s in range(3):  # A − λ·I as NumPy formed it: λ·0 on the off-diagonal (−0 if λ < 0)
                m[r, s] = cov[i, r, s] - lam_min * (1.0 if r == s else 0.0)
        for t, (r, s) in enumerate(((0, 1), (0, 2), (1, 2))):
            cr[t, 0] = m[r, 1] * m[s, 2] - m[r, 2] * m[s, 1]
            cr[t, 1] = m[r, 2] * m[s, 0] - m[r, 0] * m[s, 2]
            cr[t, 2] = m[r, 0] * m[s, 1] - m[r, 1] * m[s, 0]
        best, best_norm = 0, -1.0
        for t in range(3):
            norm = cr[t, 0] * cr[t, 0] + cr[t, 1] * cr[t, 1] + cr[t, 2] * cr[t, 2]
            if norm > best_norm:  # the first of equal norms, as argmax
                best, best_norm = t, norm
        length = math.sqrt(best_norm)
        bad[i] = lam_mid - lam_min <= 1e-6 * max(abs(lam_max), 1e-300) or not length > 0
        div = length if length > 0 else 1.0
        for s in range(3):
            v[i, s] = cr[best, s] / div
    return v, bad


@numba.njit(cache=True)
def _near_ties(d2, atol):
    """Rows whose ascending distances hold two within 1e-9 (relative) + atol of each other."""
    tied = np.zeros(d2.shape[0], np.bool_)
    for i in range(d2.shape[0]):
        for t in range(1, d2.shape[1]):
            if d2[i, t] - d2[i, t - 1] <= 1e-9 * d2[i, t] + atol:
                tied[i] = True
                break
    return tied


@numba.njit(cache=True, inline="always")
def _numpy_dot(x, y, n):
    """Σ x[i]·y[i] for i < n ≤ 128, summed in NumPy's order for ``(x * y).sum()``: the products, then one
    pairwise block (8 accumulators, then the tail; NumPy halves longer rows first — not needed, see
    `MAX_NEIGHBORS`), then the reduction's initial 0.0 + that. With y = 1 it is ``x.sum()``."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[i] * y[i]
        return 0.0 + res
    r0, r1, r2, r3 = x[0] * y[0], x[1] * y[1], x[2] * y[2], x[3] * y[3]
    r4, r5, r6, r7 = x[4] * y[4], x[5] * y[5], x[6] * y[6], x[7] * y[7]
    i = 8
    while i < n - n % 8:
        r0 += x[i] * y[i]
        r1 += x[i + 1] * y[i + 1]
        r2 += x[i + 2] * y[i + 2]
        r3 += x[i + 3] * y[i + 3]
        r4 += x[i + 4] * y[i + 4]
        r5 += x[i + 5] * y[i + 5]
        r6 += x[i + 6] * y[i + 6]
        r7 += x[i + 7] * y[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[i] * y[i]
        i += 1
    return 0.0 + res


@numba.njit(cache=True)
def _neighbourhood_covariances(xyz, idx, k):
    """cov[i] = Σ_t c_t c_tᵀ over the centred neighbours c_t = p_idx[i,t] − mean (t < k), bit for bit what
    NumPy gives for ``cols = xyz[:, a][idx]``, ``cols - cols.mean(axis=1, keepdims=True)``,
    ``(cols[a] * cols[b]).sum(axis=1)``."""
    n = idx.shape[0]
    cov = np.empty((n, 3, 3))
    cx, cy, cz = np.empty(k), np.empty(k), np.empty(k)
    ones = np.ones(k)
    for i in range(n):
        for t in range(k):
            j = idx[i, t]
            cx[t], cy[t], cz[t] = xyz[j, 0], xyz[j, 1], xyz[j, 2]
        mx, my, mz = _numpy_dot(cx, ones, k) / k, _numpy_dot(cy, ones, k) / k, _numpy_dot(cz, ones, k) / k
        for t in range(k):
            cx[t], cy[t], cz[t] = cx[t] - mx, cy[t] - my, cz[t] - mz
        cov[i, 0, 0] = _numpy_dot(cx, cx, k)
        cov[i, 0, 1] = cov[i, 1, 0] = _numpy_dot(cx, cy, k)
        cov[i, 0, 2] = cov[i, 2, 0] = _numpy_dot(cx, cz, k)
        cov[i, 1, 1] = _numpy_dot(cy, cy, k)
        cov[i, 1, 2] = cov[i, 2, 1] = _numpy_dot(cy, cz, k)
        cov[i, 2, 2] = _numpy_dot(cz, cz, k)
    return cov


@stage("sensor_noise", params=SensorNoiseParams, version=2, columns=("sigma", "mu"))  # v2: closed-form eigenvectors
def sensor_noise(frame: Frame, params: SensorNoiseParams, rng: np.random.Generator) -> Frame:
    for name in ("a", "b", "c", "k", "q"):
        lo, hi = getattr(params, name)
        if not 0 <= lo <= hi:
            raise ValueError(f"sensor_noise: {name} must be a range 0 ≤ lo ≤ hi, got {(lo, hi)}")
    if params.q[1] > 1:
        raise ValueError(f"sensor_noise: q is a probability, got {params.q}")
    az = rng.uniform(0.0, 2.0 * np.pi)
    el = rng.uniform(-np.deg2rad(params.max_elevation_deg), np.deg2rad(params.max_elevation_deg))
    sensor = params.sensor_radius * np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    a, b, c, k, q = (float(rng.uniform(*getattr(params, n))) for n in ("a", "b", "c", "k", "q"))
    xyz = frame.xyz.astype(np.float64)
    v = xyz - sensor
    r = np.sqrt((v * v).sum(axis=1))
    u = v / r[:, None]
    key = ("pca_normals", params.neighbors)
    if key not in frame.derived:  # once per shape: every severity of it reuses the same normals
        frame.derived[key] = pca_normals(xyz, params.neighbors)
    normals = frame.derived[key]
    cos_t = np.abs(np.clip((u * normals).sum(axis=1), -1.0, 1.0))
    sigma = (a + b * r) * (1.0 + c * (1.0 - cos_t))
    mu = k * (1.0 - cos_t)
    eps = rng.normal(mu, sigma)
    out = xyz + eps[:, None] * u
    outlier = rng.random(len(xyz)) < q
    w = params.outlier_half_width
    out[outlier] = rng.uniform(-w, w, (int(outlier.sum()), 3))
    points = frame.points.copy()
    points[:, :3] = out
    tag = np.where(outlier, PointTag.SYNTHETIC, PointTag.JITTER).astype(np.uint8)
    return frame.with_points(points, point_tag=tag, sigma=sigma.astype(np.float32), mu=mu.astype(np.float32)) \
        .with_info(sensor=[float(x) for x in sensor], a=a, b=b, c=c, k=k, q=q, outliers=int(outlier.sum()))
