"""sensor_noise (ModelNet40-E's released generator): σ/μ formula, noise along the ray, outlier rate, normals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.sources.demo.objects import class_mesh
from bench_build.sources.mesh import sample_surface, unit_sphere
from bench_build.stages.frame import PointTag
from bench_build.stages.whole_shape.sensor_noise import (
    SensorNoiseParams,
    pca_normals,
    sensor_noise,
    smallest_eigenvectors,
)
from tests.stages.objects import make_object, make_sphere, rng_for, snapshot, unchanged

# paper Table 1 (×10³ and % converted), light / moderate / heavy
LEVELS = {
    "light": dict(a=(0.002, 0.004), b=(0.0005, 0.0015), c=(1.0, 2.0), k=(0.0025, 0.0075), q=(0.005, 0.015)),
    "moderate": dict(a=(0.003, 0.007), b=(0.001, 0.003), c=(1.5, 2.5), k=(0.005, 0.015), q=(0.01, 0.03)),
    "heavy": dict(a=(0.005, 0.015), b=(0.002, 0.004), c=(2.0, 4.0), k=(0.01, 0.025), q=(0.04, 0.08)),
}


def test_normals_equal_the_per_point_loop_of_the_anchor():
    """Vectorised normals = for each point, the smallest eigenvector of np.cov of its 10 nearest (sign-free)."""
    xyz = make_object(3, n=2048).xyz.astype(np.float64)
    fast = pca_normals(xyz, 10)
    _, idx = cKDTree(xyz).query(xyz, k=10)
    for i in range(0, 2048, 37):
        w, v = np.linalg.eigh(np.cov(xyz[idx[i]].T))
        if w[1] - w[0] > 1e-9 * max(w[2], 1e-30):  # a well-defined smallest direction
            assert abs(abs(fast[i] @ v[:, 0]) - 1) < 1e-6


def _numpy_smallest_eigenvectors(cov: np.ndarray) -> np.ndarray:
    """`smallest_eigenvectors` as it was in NumPy (transcribed): the reference for the bytes."""
    a, b, c = cov[:, 0, 0], cov[:, 1, 1], cov[:, 2, 2]
    d, e, f = cov[:, 0, 1], cov[:, 0, 2], cov[:, 1, 2]
    q = (a + b + c) / 3.0
    p = np.sqrt(((a - q) ** 2 + (b - q) ** 2 + (c - q) ** 2 + 2.0 * (d * d + e * e + f * f)) / 6.0)
    ps = np.where(p > 0, p, 1.0)
    aq, bq, cq = (a - q) / ps, (b - q) / ps, (c - q) / ps
    dp, ep, fp = d / ps, e / ps, f / ps
    det = aq * (bq * cq - fp * fp) - dp * (dp * cq - fp * ep) + ep * (dp * fp - bq * ep)
    phi = np.arccos(np.clip(det / 2.0, -1.0, 1.0)) / 3.0
    lam_max = q + 2.0 * p * np.cos(phi)
    lam_min = q + 2.0 * p * np.cos(phi + 2.0 * np.pi / 3.0)
    lam_mid = 3.0 * q - lam_max - lam_min
    m = cov - lam_min[:, None, None] * np.eye(3)
    r0, r1, r2 = m[:, 0], m[:, 1], m[:, 2]
    crosses = np.stack([np.cross(r0, r1), np.cross(r0, r2), np.cross(r1, r2)], axis=1)
    norms = (crosses * crosses).sum(axis=2)
    best = norms.argmax(axis=1)
    v = crosses[np.arange(len(cov)), best]
    n = np.sqrt(norms[np.arange(len(cov)), best])
    bad = (lam_mid - lam_min <= 1e-6 * np.maximum(np.abs(lam_max), 1e-300)) | ~(n > 0)
    v = v / np.where(n > 0, n, 1.0)[:, None]
    if bad.any():
        v[bad] = np.linalg.eigh(cov[bad])[1][:, :, 0]
    return v


def _kdtree_normals(xyz: np.ndarray, neighbors: int) -> np.ndarray:
    """`pca_normals` up to stage version 2 (scipy KD-tree query + NumPy sums): the reference for the bytes."""
    k = min(neighbors, len(xyz))
    _, idx = cKDTree(xyz, balanced_tree=False, compact_nodes=False).query(xyz, k=k)
    idx = idx.reshape(len(xyz), k)
    cols = [xyz[:, j][idx] for j in range(3)]
    cols = [c - c.mean(axis=1, keepdims=True) for c in cols]
    cov = np.empty((len(xyz), 3, 3))
    for i in range(3):
        for j in range(i, 3):
            cov[:, i, j] = cov[:, j, i] = (cols[i] * cols[j]).sum(axis=1)
    return _numpy_smallest_eigenvectors(cov)


def _normal_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    demo = {f"demo {c}": unit_sphere(sample_surface(class_mesh(c, 1000), 2048, np.random.default_rng(i)))
            for i, c in enumerate(("airplane", "chair", "lamp", "table"))}
    shape = demo["demo chair"]
    g = np.arange(40) * 0.025
    grid = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    cases = {
        **demo,
        "sphere": make_sphere(4).xyz,
        "chair boxes": make_object(5, n=2048).xyz,
        "duplicated points": np.concatenate([shape[:1500], shape[rng.integers(0, 1500, 548)]]),
        "coplanar grid (exact ties)": np.column_stack([grid, np.zeros(len(grid))]),
        "coplanar random": np.column_stack([rng.uniform(-1, 1, (2048, 2)), np.full(2048, 0.25)]),
        "N < k": shape[:6],
        "N = k": shape[:10],
        "N = k + 1": shape[:11],
        "one point ×50": np.tile(shape[:1], (50, 1)),
        "a 1e-7 cluster": shape[0] + rng.normal(0, 1e-7, (300, 3)),
    }
    return {name: np.asarray(v, dtype=np.float32).astype(np.float64) for name, v in cases.items()}


@pytest.mark.parametrize("name", list(_normal_cases()))
def test_normals_are_the_bytes_of_the_kdtree_version(name):
    """The grid search + numba sums give the very bytes of the KD-tree version (stage version unchanged),
    ties and degenerate neighbourhoods included."""
    xyz = _normal_cases()[name]
    for k in (1, 3, 10, 20):
        got, want = pca_normals(xyz, k), _kdtree_normals(xyz, k)
        assert got.shape == want.shape == (len(xyz), 3)
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    with pytest.raises(ValueError, match="neighbors"):
        pca_normals(xyz, 129)


def test_zero_noise_is_identity():
    shape = make_sphere()
    zero = SensorNoiseParams(a=(0, 0), b=(0, 0), c=(0, 0), k=(0, 0), q=(0, 0))
    out = sensor_noise(shape, zero, rng_for(0))
    np.testing.assert_allclose(out.points, shape.points, atol=1e-7)
    assert (out.labels["sigma"] == 0).all() and (out.labels["mu"] == 0).all()
    with pytest.raises(ValueError, match="q"):
        sensor_noise(shape, SensorNoiseParams(a=(0, 0), b=(0, 0), c=(0, 0), k=(0, 0), q=(0.5, 1.5)), rng_for(0))


@pytest.mark.parametrize("level", list(LEVELS))
def test_sigma_mu_formula_noise_and_outliers(level):
    params = SensorNoiseParams(**LEVELS[level])
    shape = make_sphere(1)
    snap = snapshot(shape)
    p = shape.xyz.astype(np.float64)
    normal = pca_normals(p, 10)  # checked against the anchor's loop above
    analytic = p / np.linalg.norm(p, axis=1, keepdims=True)
    assert np.median(np.abs((normal * analytic).sum(axis=1))) > np.cos(np.deg2rad(5))
    z_all, outliers, total = [], 0, 0
    for seed in range(25):
        out = sensor_noise(shape, params, rng_for(seed))
        info = out.info
        for name in ("a", "b", "c", "k", "q"):
            lo, hi = LEVELS[level][name]
            assert lo <= info[name] <= hi
        s = np.array(info["sensor"])
        assert np.linalg.norm(s) == pytest.approx(2.0)
        assert abs(np.arcsin(s[2] / 2.0)) <= np.pi / 4 + 1e-12
        v = p - s
        r = np.linalg.norm(v, axis=1)
        u = v / r[:, None]
        cos_t = np.abs((u * normal).sum(axis=1))
        want_sigma = (info["a"] + info["b"] * r) * (1 + info["c"] * (1 - cos_t))
        want_mu = info["k"] * (1 - cos_t)
        np.testing.assert_allclose(out.labels["sigma"], want_sigma, rtol=1e-5)
        np.testing.assert_allclose(out.labels["mu"], want_mu, rtol=1e-5, atol=1e-9)
        tag = out.point_tag
        assert set(np.unique(tag).tolist()) <= {PointTag.JITTER, PointTag.SYNTHETIC}
        moved = out.xyz.astype(np.float64) - p
        ok = tag == PointTag.JITTER
        eps = (moved[ok] * u[ok]).sum(axis=1)
        # displacement is along the sensor ray only
        assert np.abs(moved[ok] - eps[:, None] * u[ok]).max() < 1e-6
        z_all.append((eps - out.labels["mu"][ok]) / out.labels["sigma"][ok])
        assert (np.abs(out.xyz[~ok]) <= 0.5).all()  # outliers in the [−0.5, 0.5]³ box
        outliers += int((~ok).sum())
        total += len(ok)
        assert info["outliers"] == int((~ok).sum())
    z = np.concatenate(z_all)
    assert abs(z.mean()) < 5 / np.sqrt(len(z)) and abs(z.std() - 1) < 5 / np.sqrt(2 * len(z))
    q_mean = np.mean(LEVELS[level]["q"])  # q ~ U(lo, hi) per shape, outliers ~ Bernoulli(q) per point
    lo, hi = LEVELS[level]["q"]
    sd = np.sqrt((hi - lo) ** 2 / 12 / 25 + q_mean * (1 - q_mean) / total)
    assert abs(outliers / total - q_mean) < 5 * sd
    assert unchanged(shape, snap)


def test_mean_sigma_grows_with_level():
    shape = make_object(2, n=2048)
    means = [np.mean([sensor_noise(shape, SensorNoiseParams(**LEVELS[lv]), rng_for(s)).labels["sigma"].mean()
                      for s in range(30)]) for lv in LEVELS]
    assert means == sorted(means)


def test_closed_form_eigenvectors_match_eigh_including_degenerate_rows():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(2000, 3, 3))
    cov = a @ a.transpose(0, 2, 1)
    cov[:5] = np.eye(3)  # isotropic: any direction is an eigenvector of the smallest eigenvalue
    cov[5:10] = np.diag([1.0, 1.0, 4.0])  # two equal smallest eigenvalues
    cov[10:15] = np.diag([0.0, 2.0, 3.0])  # a planar neighbourhood: exact zero eigenvalue
    v = smallest_eigenvectors(cov)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-9)
    w = np.linalg.eigvalsh(cov)[:, 0]
    residual = np.linalg.norm(np.einsum("nij,nj->ni", cov, v) - w[:, None] * v, axis=1)
    assert residual.max() < 1e-8 * max(1.0, np.abs(cov).max())
    ref = np.linalg.eigh(cov[15:])[1][:, :, 0]
    assert np.abs(np.abs((v[15:] * ref).sum(axis=1)) - 1).max() < 1e-6


def test_closed_form_eigenvectors_are_the_bytes_of_the_numpy_version():
    rng = np.random.default_rng(8)
    a = rng.normal(size=(3000, 3, 3)) * 10.0 ** rng.integers(-6, 3, (3000, 1, 1))
    cov = a @ a.transpose(0, 2, 1)
    cov[:4] = 0.0  # a single repeated point
    cov[4:8] = np.eye(3)
    cov[8:12] = np.diag([1.0, 1.0, 4.0])
    cov[12:16] = np.diag([0.0, 2.0, 3.0])
    cov[16:20, 0, 1] = cov[16:20, 1, 0] = -0.0  # signed zeros survive A − λI as NumPy formed it
    cov[20:24] = np.diag([-1e-18, 1.0, 2.0])  # λ_min < 0 by rounding: λ·0 = −0 off the diagonal
    v = smallest_eigenvectors(cov)
    np.testing.assert_array_equal(v.view(np.int64), _numpy_smallest_eigenvectors(cov).view(np.int64))


def test_normals_are_computed_once_per_shape_and_reused():
    shape = make_sphere(3)
    params = SensorNoiseParams(**LEVELS["light"])
    a = sensor_noise(shape, params, rng_for(1))
    cached = shape.derived[("pca_normals", 10)]
    np.testing.assert_array_equal(cached, pca_normals(shape.xyz.astype(np.float64), 10))
    b = sensor_noise(shape, params, rng_for(1))  # same key → same output, from the cached normals
    np.testing.assert_array_equal(a.points, b.points)
    assert "pca_normals" not in str(list(a.derived))  # the output frame is a new frame with its own cache
