"""local_dec: delete 75 of the 100 nearest neighbours of ⌊N/d⌋ random centres (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.kitti import generate_frame
from bench_build.stages.density.cutout import CutoutParams, cutout
from bench_build.stages.density.local_dec import LocalDecParams, local_dec
from tests.stages.conftest import indexed, removed_mask, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("local_dec").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("local_dec").params  # the released generator (the default)




def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [300, 250, 200, 150, 100]
    assert all(p.k == 100 and p.drop_fraction == 0.75 for p in SEVERITIES)


@pytest.mark.parametrize(
    "params", [LocalDecParams(math.inf, rule="text"),
        LocalDecParams(100, k=0, rule="text"),
        LocalDecParams(100, drop_fraction=0.0, rule="text")]
)
def test_zero_strength_is_identity(scene, params):
    out = local_dec(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


def test_count_rounding_to_zero_is_identity(scene):
    small = scene.take(np.arange(99))
    assert np.array_equal(local_dec(small, LocalDecParams(100, rule="text"), rng_for(0)).points, small.points)


def test_fewer_points_than_k_uses_the_whole_scan(scene):
    small = scene.take(np.arange(40))
    assert len(local_dec(small, LocalDecParams(40, k=100, rule="text"), rng_for(0))) == 10  # 40 − round(0.75 · 40)


@pytest.mark.parametrize(
    "params",
    [LocalDecParams(0, rule="text"),
        LocalDecParams(-1, rule="text"),
        LocalDecParams(100, k=-1, rule="text"),
        LocalDecParams(100, drop_fraction=1.5, rule="text"),
     LocalDecParams(100, drop_fraction=-0.1, rule="text")],
)
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="local_dec"):
        local_dec(scene, params, rng_for(0))


@pytest.mark.parametrize("seed", range(3))
def test_single_centre_deletes_75_of_its_100_neighbours(scene, seed):
    scene = indexed(scene)
    out = local_dec(scene, LocalDecParams(len(scene), rule="text"), rng_for(seed))  # one centre
    removed = removed_mask(scene, out)
    assert removed.sum() == 75
    # the 75 lie in one kNN neighbourhood: the 100-NN of some point nearby contains all of them
    idx = np.flatnonzero(removed)
    _, cand = scene.kdtree.query(scene.xyz[idx].mean(axis=0).astype(np.float64), k=200)
    _, nn = scene.kdtree.query(scene.xyz[cand].astype(np.float64), k=100)
    assert any(np.isin(idx, row).all() for row in nn)


@pytest.mark.parametrize("severity", range(1, 6))
def test_removed_count_and_locality(scene_with_ring, severity):
    scene_with_ring = indexed(scene_with_ring)
    p = SEVERITIES[severity - 1]
    n = len(scene_with_ring)
    centres = n // p.count_divisor
    out = local_dec(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32
    removed = removed_mask(scene_with_ring, out)
    # neighbourhoods overlap, so the union is below centres·75; a Poisson-coverage model (each point in
    # λ = centres·k/N neighbourhoods on average, each deleting it with p = 0.75) predicts the shortfall
    lam = centres * p.k / n
    predicted = n * (1 - np.exp(-0.75 * lam))
    assert 75 <= removed.sum() <= centres * 75
    assert removed.sum() == pytest.approx(predicted, rel=0.05)
    # deletions are local: removed points' neighbourhoods are depleted well beyond the global rate
    _, nn = scene_with_ring.kdtree.query(scene_with_ring.xyz[removed].astype(np.float64), k=11)
    assert removed[nn[:, 1:]].mean() > removed.mean() + 0.2


def test_effect_grows_with_severity(scene):
    removed = [len(scene) - len(local_dec(scene, p, rng_for(1))) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(removed))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_removes_exactly_centres_times_80(demo_scan, severity):
    p = CODE[severity - 1]
    assert (p.rule, p.k, p.drop_fraction) == ("code", 100, 0.8)
    frame = indexed(demo_scan)
    out = local_dec(frame, p, rng_for(severity))
    removed = removed_mask(frame, out)
    n_drop = int(p.drop_fraction * p.k)  # int((4/5)·100) = 80 in the released code
    assert removed.sum() == (len(frame) // int(p.count_divisor)) * n_drop
    assert removed.mean() == pytest.approx(n_drop / p.count_divisor, abs=2e-4)  # 26.7 / 40.0 / 80.0 %


def test_cutout_and_local_dec_share_one_deletion_grid_per_frame():
    """The sequential deletions' search grid is a per-frame cache (`Frame.deletion_grid`): built by the first
    of cutout / local_dec on a frame, reused by every later severity of both, and the output is the same as on
    a fresh copy of the frame that builds its own."""
    frame = generate_frame(0)
    assert "deletion_grid" not in frame.__dict__
    a = cutout(frame, CutoutParams(count_divisor=60), np.random.default_rng(1))
    grid = frame.__dict__["deletion_grid"]
    b = local_dec(frame, LocalDecParams(count_divisor=100), np.random.default_rng(2))
    assert frame.deletion_grid is grid  # not rebuilt
    for out, fn, params, seed in ((a, cutout, CutoutParams(count_divisor=60), 1),
                                  (b, local_dec, LocalDecParams(count_divisor=100), 2)):
        fresh = replace(frame)
        assert "deletion_grid" not in fresh.__dict__
        again = fn(fresh, params, np.random.default_rng(seed))
        assert np.array_equal(again.points, out.points) and len(out) < len(frame)
