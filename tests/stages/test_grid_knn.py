"""kernels.grid_knn: exact k nearest neighbours on a grid, and the stages that use it (cutout / local_dec
sequential deletions) give the same bytes as the KD-tree implementation they replaced (transcribed here
as the slow reference)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.kitti import generate_frame
from bench_build.stages.density.cutout import operation_count
from bench_build.stages.geometry import remove_neighbourhoods_sequentially
from bench_build.stages.kernels.grid_knn import Grid, nearest_in_grid
from bench_build.stages.kernels.neighbours import spatial_order
from tests.stages.conftest import make_scene, rng_for


def _reference_sequential(frame, n_ops: int, k: int, n_drop: int, rng: np.random.Generator) -> np.ndarray:
    """The KD-tree implementation of `remove_neighbourhoods_sequentially` before the grid (same rng use)."""
    rebuild, margin = 0.6, 1.3
    n = len(frame)
    keep = np.ones(n, dtype=bool)
    if n_ops <= 0 or k <= 0 or n_drop <= 0 or n == 0:
        return keep
    xyz = frame.xyz.astype(np.float64)
    n_drop = min(n_drop, k)
    subsets = np.argsort(rng.random((n_ops, k)), axis=1)[:, :n_drop] if n_drop < k else None
    tree, ids = cKDTree(xyz), np.arange(n)
    present, op = n, 0
    while op < n_ops and present > 0:
        if present < rebuild * len(ids):
            ids = np.flatnonzero(keep)
            tree = cKDTree(xyz[ids])
        ops_ahead = min(n_ops - op, int((present - rebuild * len(ids)) / n_drop) + 1)
        chunk = min(4096, int(ops_ahead * n / present * 1.1) + 4)
        cand = rng.integers(0, n, size=chunk)
        cand = cand[keep[cand]]
        kq = min(len(ids), int(k * len(ids) / present * margin) + 8)
        order = spatial_order(xyz[cand])
        nbrs = np.empty((len(cand), kq), dtype=np.int64)
        nbrs[order] = np.asarray(tree.query(xyz[cand][order], k=kq)[1]).reshape(len(cand), kq)
        nbrs = ids[nbrs]
        for i in range(len(cand)):
            c = cand[i]
            if not keep[c]:
                continue
            nb = nbrs[i]
            live = nb[keep[nb]]
            want, kk = min(k, present), kq
            while len(live) < want and kk < len(ids):
                kk = min(len(ids), kk * 2)
                nb = ids[np.atleast_1d(tree.query(xyz[c], k=kk)[1])]
                live = nb[keep[nb]]
            live = live[:want]
            live = live[subsets[op]] if subsets is not None and want == k else live[:n_drop]
            keep[live] = False
            present -= len(live)
            op += 1
            if op == n_ops or present == 0 or present < rebuild * len(ids):
                break
    return keep


@pytest.mark.parametrize("cell", [0.05, 0.5, 3.0])
def test_knn_matches_brute_force_with_and_without_a_mask(cell):
    rng = np.random.default_rng(3)
    xyz = np.concatenate([rng.normal(0, 2, (3000, 3)), rng.uniform(-30, 30, (300, 3))])
    xyz[100:110] = xyz[0]  # duplicates: ties broken by the lower index
    g = Grid(xyz, cell)
    alive = rng.random(len(xyz)) < 0.3
    q = np.concatenate([xyz[:50] + rng.normal(0, 0.05, (50, 3)), rng.uniform(-60, 60, (50, 3)), xyz[:1]])
    for k, mask in ((5, False), (40, True)):
        bi, bd = np.empty(k, np.int64), np.empty(k)
        for p in q:
            got = nearest_in_grid(p[0], p[1], p[2], k, alive, mask, *g.args(), bi, bd)
            cand = np.flatnonzero(alive) if mask else np.arange(len(xyz))
            d2 = ((xyz[cand] - p) ** 2).sum(axis=1)
            want = cand[np.lexsort((cand, d2))][:k]
            assert got == k and np.array_equal(bi, want)


@pytest.mark.parametrize("corruption,severity", [("local_dec", 1), ("local_dec", 5), ("cutout", 3)])
def test_sequential_deletion_is_byte_identical_to_the_kdtree_version(corruption, severity):
    p = load_recipe("kitti-c").corruption(corruption).params[severity - 1]
    n_drop = p.k if corruption == "cutout" else int(p.drop_fraction * p.k)
    for frame in (generate_frame(0), make_scene(2)):
        n_ops = operation_count(len(frame), p.count_divisor, p.k, corruption)
        got = remove_neighbourhoods_sequentially(frame, n_ops, p.k, n_drop, rng_for(7))
        want = _reference_sequential(frame, n_ops, p.k, n_drop, rng_for(7))
        assert np.array_equal(got, want)
        assert (~got).sum() == n_ops * n_drop  # every operation found its k present neighbours
