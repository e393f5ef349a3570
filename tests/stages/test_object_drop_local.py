"""object_drop_local: K points removed as the nearest neighbours of C random centres (ModelNet-C A.5)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.stages.whole_shape.object_drop_local import ObjectDropLocalParams, object_drop_local
from tests.stages.objects import LOCAL_K, make_object, rng_for, snapshot, unchanged


def _removed(shape, out) -> np.ndarray:
    keep = {tuple(r) for r in out.xyz.tolist()}
    return np.array([tuple(r) not in keep for r in shape.xyz.tolist()])


def test_zero_points_removes_nothing():
    shape = make_object()
    assert len(object_drop_local(shape, ObjectDropLocalParams(0), rng_for(0))) == 1024
    with pytest.raises(ValueError, match="points"):
        object_drop_local(shape, ObjectDropLocalParams(1024), rng_for(0))


@pytest.mark.parametrize("level", range(5))
def test_counts_and_one_cluster_is_a_knn_ball(level):
    k = LOCAL_K[level]
    shape = make_object(level)
    snap = snapshot(shape)
    out = object_drop_local(shape, ObjectDropLocalParams(k), rng_for(level))
    assert len(out) == 1024 - k and out.attrs == shape.attrs and 1 <= out.info["clusters"] <= 7
    # a single cluster removes exactly the k nearest neighbours (centre included) of one input point
    one = object_drop_local(shape, ObjectDropLocalParams(k, max_clusters=1), rng_for(level))
    removed = _removed(shape, one)
    assert removed.sum() == k
    tree = cKDTree(shape.xyz)
    balls = [set(tree.query(shape.xyz[c], k=k)[1].tolist()) for c in np.flatnonzero(removed)]
    assert set(np.flatnonzero(removed).tolist()) in balls
    assert unchanged(shape, snap)


@pytest.mark.parametrize("max_clusters", [7, 8])
def test_cluster_count_is_uniform_over_1_to_max(max_clusters):
    """Released code: randint(1, 8) → C ∈ {1..7}; the paper's text: U{1, 8} (the text variant)."""
    shape = make_object()
    cs = np.array([object_drop_local(shape, ObjectDropLocalParams(100, max_clusters), rng_for(s)).info["clusters"]
                   for s in range(1400)])
    assert set(cs.tolist()) == set(range(1, max_clusters + 1))
    freq = np.bincount(cs, minlength=max_clusters + 1)[1:] / len(cs)
    p = 1 / max_clusters
    assert np.abs(freq - p).max() < 5 * np.sqrt(p * (1 - p) / len(cs))


def test_removed_points_are_local():
    """The removed points of a drop are far more compact than a random subset of the same size."""
    shape = make_object()
    out = object_drop_local(shape, ObjectDropLocalParams(300, max_clusters=1), rng_for(3))
    removed = shape.xyz[_removed(shape, out)]
    rand = shape.xyz[rng_for(4).choice(1024, 300, replace=False)]
    assert removed.std(axis=0).sum() < 0.6 * rand.std(axis=0).sum()
