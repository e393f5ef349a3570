"""local_inc: k = 100 points sampled on a quadratic fitted to each of ⌊N/d⌋ kNN neighbourhoods
(Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.density.local_inc import LocalIncParams, knn_with_intensity, local_inc
from bench_build.stages.frame import Frame, PointTag
from tests.stages.conftest import indexed, make_scene, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("local_inc").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("local_inc").params  # the released generator (the default)



def _sphere(n: int = 20_000, radius: float = 5.0, centre=(10.0, 0.0, 0.0)) -> Frame:
    rng = np.random.default_rng(3)
    v = rng.normal(size=(n, 3))
    v = v / np.linalg.norm(v, axis=1, keepdims=True) * radius + centre
    return Frame("sphere", np.concatenate([v, rng.uniform(0, 1, (n, 1))], axis=1).astype(np.float32))


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [2000, 1500, 1000, 800, 600]
    assert all(p.k == 100 for p in SEVERITIES)


@pytest.mark.parametrize("params", [LocalIncParams(math.inf, rule="text"), LocalIncParams(600, k=0, rule="text")])
def test_zero_strength_is_identity(scene, params):
    out = local_inc(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


def test_count_rounding_to_zero_is_identity(scene):
    small = scene.take(np.arange(599))
    assert np.array_equal(local_inc(small, LocalIncParams(600, rule="text"), rng_for(0)).points, small.points)


def test_fewer_points_than_k_fits_the_whole_scan():
    ground = make_scene(0, n_ground=1000).take(np.arange(50))  # 50 ground points
    out = local_inc(ground, LocalIncParams(50, k=100, rule="text"), rng_for(0))  # one centre, k clipped to 50
    assert len(out) == 100
    assert np.allclose(out.xyz[50:, 2], -1.73, atol=1e-4)


@pytest.mark.parametrize("params", [LocalIncParams(0, rule="text"),
    LocalIncParams(-3, rule="text"),
    LocalIncParams(600, k=-1, rule="text")])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="local_inc"):
        local_inc(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_adds_centres_times_k_points_near_the_surface(scene_with_ring, severity):
    scene_with_ring = indexed(scene_with_ring)
    p = SEVERITIES[severity - 1]
    n = len(scene_with_ring)
    out = local_inc(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32
    assert len(out) - n == (n // p.count_divisor) * p.k
    assert np.array_equal(out.points[:n], scene_with_ring.points)
    assert np.all(out.point_tag[n:] == PointTag.SYNTHETIC) and np.all(out.point_tag[:n] == PointTag.CLEAN)
    new = out.xyz[n:].astype(np.float64)
    d, _ = scene_with_ring.kdtree.query(new)
    spacing = np.median(scene_with_ring.kdtree.query(scene_with_ring.xyz.astype(np.float64), k=2)[0][:, 1])
    assert np.median(d) < 1.5 * spacing  # on the scan's surfaces, as dense as the scan itself
    assert np.percentile(d, 99) < 1.0
    assert np.mean(d < 1e-6) < 0.01  # not copies of original points
    # most neighbourhoods are on the (exactly planar) ground or wall: their new points are on the plane
    on_plane = (np.abs(new[:, 2] + 1.73) < 1e-3) | (np.abs(new[:, 1] - 12.0) < 1e-3)
    assert on_plane.mean() > 0.6
    # intensity and ring come from a nearby original point (the nearest of the neighbourhood)
    src = out.labels["src"][n:]
    assert np.array_equal(out.points[n:, 3:], scene_with_ring.points[src, 3:])
    assert np.median(np.linalg.norm(new - scene_with_ring.xyz[src], axis=1)) < 1.5 * spacing


def test_points_lie_on_a_curved_surface():
    sphere = _sphere()
    out = local_inc(sphere, LocalIncParams(200, rule="text"), rng_for(1))  # 100 centres
    new = out.xyz[len(sphere):].astype(np.float64)
    assert len(new) == 100 * 100
    err = np.abs(np.linalg.norm(new - [10.0, 0.0, 0.0], axis=1) - 5.0)
    assert np.max(err) < 5e-3  # a plane fit (no quadratic terms) is off by up to ≈ 8 cm here


def test_single_neighbourhood_is_filled_over_its_extent():
    ground = make_scene(0, n_ground=40_000)
    ground = ground.take(np.abs(ground.xyz[:, 2] + 1.73) < 1e-6)
    out = local_inc(ground, LocalIncParams(len(ground), rule="text"), rng_for(2))  # one centre
    new = out.xyz[len(ground):].astype(np.float64)
    assert len(new) == 100 and np.allclose(new[:, 2], -1.73, atol=1e-4)
    _, nn = ground.kdtree.query(new.mean(axis=0), k=100)
    nbr = ground.xyz[nn].astype(np.float64)
    mu = nbr.mean(axis=0)
    rim = np.linalg.norm(nbr[:, :2] - mu[:2], axis=1).max()
    assert np.linalg.norm(new[:, :2] - mu[:2], axis=1).max() <= np.sqrt(2) * rim + 1e-6
    ratio = new[:, :2].std(axis=0).mean() / nbr[:, :2].std(axis=0).mean()
    assert 0.8 < ratio < 1.6  # spread over the neighbourhood, not bunched at its centre


def test_effect_grows_with_severity(scene):
    added = [len(local_inc(scene, p, rng_for(1))) - len(scene) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(added))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

def _quadratic_residual(local):
    """Least-squares residual (RMS) of the released model h = w·[1, u, v, u², v², uv]."""
    u, v, h = local[:, 0], local[:, 1], local[:, 2]
    a = np.stack([np.ones_like(u), u, v, u * u, v * v, u * v], axis=1)
    w, *_ = np.linalg.lstsq(a, h, rcond=None)
    return np.sqrt(np.mean((a @ w - h) ** 2))


@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_adds_k_points_per_centre_on_a_quadratic_of_the_narrowest_axis(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and p.k == 100
    out = local_inc(demo_scan, p, rng_for(severity))
    n, c = len(demo_scan), len(demo_scan) // int(p.count_divisor)
    assert len(out) == n + c * p.k
    assert np.all(out.point_tag[n:] == PointTag.SYNTHETIC)
    new = out.xyz[n:].astype(np.float64).reshape(c, p.k, 3)
    # replay the centres (the first draw) and their 4D neighbourhoods to check each block against its rule
    centres = rng_for(severity).integers(0, n, size=c)
    nn = knn_with_intensity(demo_scan, centres, p.k)
    xyz = demo_scan.xyz.astype(np.float64)
    for b in range(0, c, max(1, c // 12)):
        nbr = xyz[nn[b]]
        h = int(np.argmin(nbr.max(axis=0) - nbr.min(axis=0)))
        u, v = [(1, 2), (2, 0), (0, 1)][h]
        block = new[b][:, [u, v, h]]
        assert _quadratic_residual(block) < 1e-3  # exactly on a quadratic in (u, v) (float32 output)
        # (u, v) ~ N(mean, std) of the neighbours: block statistics within sampling error of 100 draws
        for col, ax in ((0, u), (1, v)):
            m, s = nbr[:, ax].mean(), nbr[:, ax].std()
            assert abs(block[:, col].mean() - m) < 0.5 * s + 1e-6
            assert 0.6 * s - 1e-6 < block[:, col].std() < 1.4 * s + 1e-6


def test_knn_with_intensity_is_exact(demo_scan):
    rng = np.random.default_rng(0)
    centres = rng.integers(0, len(demo_scan), size=20)
    got = knn_with_intensity(demo_scan, centres, 100)
    p4 = np.concatenate([demo_scan.xyz, demo_scan.intensity[:, None]], axis=1).astype(np.float64)
    for i, c in enumerate(centres):
        d = ((p4 - p4[c]) ** 2).sum(axis=1)
        assert set(got[i]) == set(np.argsort(d, kind="stable")[:100])
