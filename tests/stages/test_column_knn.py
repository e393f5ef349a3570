"""kernels.column_knn: the grid search gives exactly the KD-tree's neighbours (same indices, same order, so the
same bytes of the mean intensity), on the demo scan and on adversarial clouds (ties, duplicates, tiny N,
far queries, tall columns); and `upsample` gives the same bytes as its KD-tree version (transcribed here)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.kernels.column_knn import knn_near, mean_of_nearest, row_means, search, select_smallest
from bench_build.stages.kernels.neighbours import query_in_spatial_order
from bench_build.stages.noise.upsample import UpsampleParams, upsample
from tests.stages.conftest import make_scene, rng_for

CODE = load_recipe("kitti-c").corruption("upsample").params


def _near_queries(xyz: np.ndarray, m: int, seed: int, offset: float = 0.1) -> np.ndarray:
    """``m`` points at distinct data points + U(−offset, offset)³: what upsample asks."""
    rng = np.random.default_rng(seed)
    parents = rng.choice(len(xyz), size=m, replace=False)
    return xyz[parents].astype(np.float64) + rng.uniform(-offset, offset, (m, 3))


def _check(points: np.ndarray, queries: np.ndarray, k: int) -> None:
    """knn_near / mean_of_nearest against the KD-tree, byte for byte."""
    xyz = points[:, :3].astype(np.float64)
    tree = cKDTree(xyz)
    want = np.asarray(tree.query(queries, k=k)[1]).reshape(len(queries), k)
    got = knn_near(points, queries, k, lambda: tree)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    means = mean_of_nearest(points, 3, queries, k, lambda: tree)
    assert means.tobytes() == points[:, 3].astype(np.float64)[want].mean(axis=1).tobytes()


def test_demo_scan_is_the_kdtrees_answer_and_mostly_settled_by_the_grid(demo_scan):
    for m, seed in ((len(demo_scan) // 2, 0), (len(demo_scan) // 10, 1)):
        q = _near_queries(demo_scan.xyz, m, seed)
        _check(demo_scan.points, q, 5)
        _, _, _, exact = search(demo_scan.points, q, 5, 3)
        assert exact.mean() > 0.95  # the KD-tree answers only the few far queries: the grid path is what is tested


@pytest.mark.parametrize("k", [1, 5, 12])
def test_scene_with_far_and_outside_queries(k):
    frame = make_scene(3)
    rng = np.random.default_rng(k)
    q = np.concatenate([
        _near_queries(frame.xyz, 4000, k),
        rng.uniform(-60, 60, (300, 3)),  # far from the data: beyond the grid's reach
        frame.xyz[:50].astype(np.float64),  # exactly on data points
        np.array([[1e3, -1e3, 50.0], [frame.xyz[:, 0].max() + 0.05, 0.0, -1.7]]),  # outside the bounding box
    ])
    _check(frame.points, q, k)


def test_ties_and_duplicates_are_left_to_the_kdtree():
    """A lattice (every query at a lattice point or a cell centre has many equidistant neighbours) with every
    point doubled: any order of tied points is the KD-tree's, which answers them."""
    g = np.stack(np.meshgrid(np.arange(12.0), np.arange(10.0), np.arange(4.0), indexing="ij"), -1).reshape(-1, 3)
    xyz = np.concatenate([g, g[::3]]) * 0.25
    rng = np.random.default_rng(5)
    points = np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), 1))], axis=1).astype(np.float32)
    centres = (g[:200] + 0.5) * 0.25
    q = np.concatenate([centres, xyz[:100] * 1.0, _near_queries(xyz, 300, 6, 0.05)])
    _check(points, q, 5)
    _, _, _, exact = search(points, centres, 5, 3)
    assert not exact.any()  # 8 equidistant corners: all answered by the KD-tree


@pytest.mark.parametrize("n", [1, 2, 4, 5, 6, 7, 8, 30])
def test_tiny_clouds(n):
    rng = np.random.default_rng(n)
    points = np.concatenate([rng.normal(0, 1, (n, 3)), rng.uniform(0, 1, (n, 1))], axis=1).astype(np.float32)
    q = points[:, :3].astype(np.float64) + rng.uniform(-0.1, 0.1, (n, 3))
    _check(points, q, min(5, n))


def test_tall_column_flat_ground_and_far_coordinates():
    """A pole (every point in one x–y column), a flat floor (one height) and the same cloud 1 km away."""
    rng = np.random.default_rng(9)
    pole = np.stack([rng.normal(0, 0.02, 3000), rng.normal(0, 0.02, 3000), rng.uniform(-2, 20, 3000)], axis=1)
    floor = np.stack([rng.uniform(-5, 5, 6000), rng.uniform(-5, 5, 6000), np.full(6000, -1.7)], axis=1)
    xyz = np.concatenate([pole, floor])
    for shift in (0.0, 1000.0):
        points = np.concatenate([xyz + shift, rng.uniform(0, 1, (len(xyz), 1))], axis=1).astype(np.float32)
        _check(points, _near_queries(points[:, :3], 3000, 10), 5)


def test_row_means_are_numpys_bytes():
    rng = np.random.default_rng(11)
    values = (rng.random(5000) * 10.0 ** rng.integers(-12, 3, 5000)).astype(np.float32)  # inexact sums
    nn = rng.integers(0, 5000, (20000, 5))
    assert row_means(values, nn).tobytes() == values.astype(np.float64)[nn].mean(axis=1).tobytes()


@pytest.mark.parametrize("k", [1, 3, 5, 8])
def test_select_gives_the_k_smallest_with_their_positions(k):
    """The branch-free pick (a min/max chain, then ranks by counting; k = 5 has its own register version): the k
    smallest distances in order, each with its storage position; with equal distances (queries the caller
    leaves to the KD-tree) the distances are still the k smallest."""
    rng = np.random.default_rng(20 + k)
    for w in (k, k + 1, 3 * k + 7):
        d = rng.random(w)
        j = rng.permutation(w).astype(np.uint64) + 100
        bd, bj = np.empty(k), np.zeros(k + 1, np.uint64)
        select_smallest(w, k, d, j, bj, bd)
        first = np.argsort(d)[:k]
        assert np.array_equal(bd, d[first]) and np.array_equal(bj[:k], j[first])
        equal = np.round(d * 3) / 3  # many equal distances
        select_smallest(w, k, equal, j, bj, bd)
        assert np.array_equal(bd, np.sort(equal)[:k])


def _upsample_kdtree(frame: Frame, params: UpsampleParams, rng: np.random.Generator) -> Frame:
    """`upsample` before the grid search (KD-tree queries in spatial order, numpy mean)."""
    n = len(frame)
    n_add = 0 if math.isinf(params.count_divisor) else min(n, int(n // params.count_divisor))
    if n_add == 0:
        return frame
    parents = rng.choice(n, size=n_add, replace=False)
    new = frame.points[parents].astype(np.float64)
    new[:, :3] += rng.uniform(-params.offset, params.offset, size=(n_add, 3))
    if params.rule == "code":
        _, nn = query_in_spatial_order(frame.kdtree, new[:, :3], min(5, n), near=0.4)
        new[:, frame.fields.index("intensity")] = frame.intensity.astype(np.float64)[nn].mean(axis=1)
    labels = {name: col[parents] for name, col in frame.labels.items() if name != "point_tag"}
    return frame.append(new.astype(np.float32), tag=PointTag.SYNTHETIC, **labels)


@pytest.mark.parametrize("severity", [1, 5])
def test_upsample_is_byte_identical_to_the_kdtree_version(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code"
    got = upsample(demo_scan, p, rng_for(severity))
    want = _upsample_kdtree(demo_scan, p, rng_for(severity))
    assert got.points.tobytes() == want.points.tobytes()
    assert np.array_equal(got.point_tag, want.point_tag)


@pytest.mark.parametrize("n", [1, 3, 5, 6, 7, 40])
def test_upsample_tiny_frames_are_byte_identical_to_the_kdtree_version(n):
    rng = np.random.default_rng(n)
    pts = np.concatenate([rng.normal(0, 0.3, (n, 3)), rng.uniform(0, 1, (n, 1))], axis=1).astype(np.float32)
    frame = Frame("tiny", pts, fields=("x", "y", "z", "intensity"))
    p = UpsampleParams(2)
    got, want = upsample(frame, p, rng_for(n)), _upsample_kdtree(frame, p, rng_for(n))
    assert got.points.tobytes() == want.points.tobytes() and len(got) == n + n // 2


def test_grid_is_cached_on_the_frame_and_shared_by_severities(demo_scan):
    frame = demo_scan.with_points(demo_scan.points)  # a fresh frame: empty cache
    outs = [upsample(frame, CODE[s - 1], rng_for(s)) for s in (2, 4)]
    grids = [v for key, v in frame.derived.items() if key[0] == "column_knn.CellGrid"]
    assert len(grids) == 1  # built once, by the first severity
    for s, out in zip((2, 4), outs, strict=True):
        assert out.points.tobytes() == _upsample_kdtree(demo_scan, CODE[s - 1], rng_for(s)).points.tobytes()


def test_a_scan_kilometres_wide_is_left_to_the_kdtree():
    rng = np.random.default_rng(12)
    xyz = np.concatenate([rng.normal(0, 5, (5000, 3)), [[4e4, -4e4, 0.0]]])
    points = np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), 1))], axis=1).astype(np.float32)
    q = _near_queries(points[:, :3], 500, 13)
    _check(points, q, 5)
    assert search(points, q, 5, 3)[1] is None  # coarse cells: the KD-tree answers every query


def test_coincident_points_do_not_stall_the_search():
    """Queries exactly on a point repeated more than k times (the previous query's k-th distance is 0, so the
    next query's first guess is 0 too): answered (by the KD-tree where tied), no endless growth of a zero radius."""
    rng = np.random.default_rng(14)
    xyz = np.concatenate([np.repeat(rng.normal(0, 1, (40, 3)), 7, axis=0), rng.normal(0, 1, (2000, 3))])
    points = np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), 1))], axis=1).astype(np.float32)
    q = np.concatenate([points[:280:7, :3], _near_queries(points[:, :3], 500, 15, 0.01)]).astype(np.float64)
    _check(points, q, 5)
