"""kernels.grid_knn.knn_all: the k nearest of every point of a cloud on a 3D grid equal a sorted brute-force
search (indices by (d², index), squared distances bit for bit), on shapes and on degenerate clouds that
exercise every path (block answer, ball fallback, one cell, flat and collinear grids, duplicates)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.kernels.grid_knn import knn_all
from tests.stages.objects import make_object, make_sphere


def _brute(xyz: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    diff = xyz[:, None, :] - xyz[None, :, :]
    d2 = (diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1]) + diff[..., 2] * diff[..., 2]
    ids = np.broadcast_to(np.arange(len(xyz)), d2.shape)
    order = np.lexsort((ids, d2), axis=1)[:, :k]
    return order, np.take_along_axis(d2, order, axis=1)


def _clouds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    g = np.arange(12) * 0.1
    plane = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    dup = rng.normal(size=(300, 3))
    dup[100:140] = dup[0]  # 41 copies of one point: more than k at distance 0
    clusters = np.concatenate([rng.normal(0, 0.01, (200, 3)), rng.normal(5, 0.01, (200, 3)),
                               rng.uniform(-20, 20, (5, 3))])  # far outliers: answered by the ball search
    return {
        "chair": make_object(4, n=1500).xyz.astype(np.float64),
        "sphere": make_sphere(2, n=1500).xyz.astype(np.float64),
        "volume": rng.uniform(-1, 1, (1200, 3)),
        "plane grid (ties)": np.column_stack([plane, np.zeros(len(plane))]),
        "line": np.column_stack([np.arange(50) * 0.5, np.zeros(50), np.zeros(50)]),
        "duplicates": dup,
        "one point ×30": np.ones((30, 3)),
        "clusters + outliers": clusters,
        "far from the origin": rng.normal(0, 1e-3, (400, 3)) + 1e4,
        "three points": rng.normal(size=(3, 3)),
    }


@pytest.mark.parametrize("name", list(_clouds()))
def test_knn_all_equals_sorted_brute_force(name):
    xyz = _clouds()[name]
    for k in (1, 4, 11, 40):
        idx, d2 = knn_all(xyz, k)
        want_i, want_d = _brute(xyz, min(k, len(xyz)))
        np.testing.assert_array_equal(idx, want_i)
        np.testing.assert_array_equal(d2, want_d)


def test_knn_all_shapes_and_errors():
    idx, d2 = knn_all(np.empty((0, 3)), 5)
    assert idx.shape == d2.shape == (0, 0)
    assert knn_all(np.zeros((4, 3)), 0)[0].shape == (4, 0)
    with pytest.raises(ValueError, match="finite"):
        knn_all(np.array([[0.0, 0.0, np.nan], [1.0, 0.0, 0.0]]), 1)
    with pytest.raises(ValueError, match="N×3"):
        knn_all(np.zeros((4, 2)), 1)
