"""cutout: erase the k = 100 nearest neighbours of ⌊N/d⌋ random centres (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.density.cutout import CutoutParams, cutout
from bench_build.stages.frame import Frame
from tests.stages.conftest import indexed, removed_mask, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("cutout").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("cutout").params  # the released generator (the default)




def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [2000, 1500, 1000, 800, 600]
    assert all(p.k == 100 for p in SEVERITIES)


@pytest.mark.parametrize("params", [CutoutParams(math.inf), CutoutParams(600, k=0)])
def test_zero_strength_is_identity(scene, params):
    out = cutout(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


def test_count_rounding_to_zero_is_identity(scene):
    small = scene.take(np.arange(500))
    assert np.array_equal(cutout(small, CutoutParams(600), rng_for(0)).points, small.points)


def test_fewer_points_than_k_erases_the_whole_scan(scene):
    small = scene.take(np.arange(50))
    assert len(cutout(small, CutoutParams(10, k=100), rng_for(0))) == 0


@pytest.mark.parametrize("params", [CutoutParams(0), CutoutParams(-1), CutoutParams(600, k=-1)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="cutout"):
        cutout(scene, params, rng_for(0))


def test_single_centre_removes_exactly_its_knn(scene):
    scene = indexed(scene)
    n = len(scene)
    out = cutout(scene, CutoutParams(n, k=100), rng_for(5))  # floor(N / N) = 1 centre
    removed = removed_mask(scene, out)
    assert removed.sum() == 100
    # some removed point (the centre) has exactly the removed set as its 100 nearest neighbours
    _, nn = scene.kdtree.query(scene.xyz[removed].astype(np.float64), k=100)
    assert any(set(row) == set(np.flatnonzero(removed)) for row in nn)


@pytest.mark.parametrize("severity", range(1, 6))
def test_removed_points_form_knn_clusters(scene_with_ring, severity):
    scene_with_ring = indexed(scene_with_ring)
    p = SEVERITIES[severity - 1]
    n = len(scene_with_ring)
    centres = n // p.count_divisor
    out = cutout(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32
    removed = removed_mask(scene_with_ring, out)
    assert p.k <= removed.sum() <= centres * p.k
    assert removed.sum() >= 0.8 * centres * p.k  # few overlaps at these densities
    # locality: most of a removed point's 10 nearest neighbours are removed too (random deletion of the
    # same count would give ≈ removed / N ≤ 17 %)
    _, nn = scene_with_ring.kdtree.query(scene_with_ring.xyz[removed].astype(np.float64), k=11)
    assert np.median(removed[nn[:, 1:]].mean(axis=1)) >= 0.7
    assert removed.mean() < 0.2


def test_effect_grows_with_severity(scene):
    removed = [len(scene) - len(cutout(scene, p, rng_for(1))) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(removed))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_removes_exactly_centres_times_k(demo_scan, severity):
    p = CODE[severity - 1]
    assert (p.rule, p.k, p.count_divisor) == ("code", 20, [200, 150, 100, 80, 60][severity - 1])
    frame = indexed(demo_scan)
    out = cutout(frame, p, rng_for(severity))
    removed = removed_mask(frame, out)
    n = len(frame)
    # one after another on the shrinking cloud: every operation erases k points, overlaps or not
    assert removed.sum() == (n // int(p.count_divisor)) * p.k
    assert removed.mean() == pytest.approx(p.k / p.count_divisor, abs=2e-4)  # 10.0 / 20.0 / 33.3 %


def test_code_rule_erases_the_k_nearest_present_points():
    """One centre on a line of points: the k nearest of the centre are erased, whatever the centre."""
    x = np.arange(200, dtype=np.float32)
    pts = np.stack([x, np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)], axis=1)
    frame = indexed(Frame("line", pts))
    for seed in range(5):
        out = cutout(frame, CutoutParams(200, k=20, rule="code"), rng_for(seed))  # one operation
        gone = np.flatnonzero(removed_mask(frame, out))
        assert len(gone) == 20 and np.all(np.diff(gone) == 1)  # a contiguous run of 20 around the centre
