"""gaussian_obj: object points += N(0, σ²) per axis (Li et al. Appendix C-B)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.per_box.gaussian_obj import GaussianObjParams, gaussian_obj
from tests.stages.conftest import rng_for, shrink_factor, unit_coords

SEVERITIES = load_recipe("kitti-c:text").corruption("gaussian_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("gaussian_obj").params  # the released generator (the default)


def test_recipe_values_are_the_papers():
    assert [p.sigma for p in SEVERITIES] == [0.02, 0.03, 0.04, 0.05, 0.06]


def test_zero_is_identity(scene):
    out = gaussian_obj(scene, GaussianObjParams(0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points) and out.boxes is scene.boxes


@pytest.mark.parametrize("bad", [-0.01, float("nan")])
def test_rejects_bad_params(scene, bad):
    with pytest.raises(ValueError, match="gaussian_obj"):
        gaussian_obj(scene, GaussianObjParams(bad), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_object_deltas_are_gaussian(scene, severity):
    sigma = SEVERITIES[severity - 1].sigma
    out = gaussian_obj(scene, SEVERITIES[severity - 1], rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene)
    obj = scene.box_index >= 0
    delta = out.xyz[obj].astype(np.float64) - scene.xyz[obj]
    assert np.allclose(delta.std(axis=0), sigma, rtol=0.04)
    assert np.allclose(delta.mean(axis=0), 0.0, atol=0.05 * sigma)
    # Gaussian, not uniform: ≈ 4.55 % of draws beyond 2σ (uniform with this σ has none beyond 1.73σ)
    tail = (np.abs(delta) > 2 * sigma).mean()
    assert 0.035 < tail < 0.057
    assert np.array_equal(out.points[~obj], scene.points[~obj])
    assert np.array_equal(out.points[:, 3:], scene.points[:, 3:])
    assert out.boxes is scene.boxes


def test_effect_grows_with_severity(scene):
    obj = scene.box_index >= 0
    spread = [np.std(gaussian_obj(scene, p, rng_for(1)).xyz[obj] - scene.xyz[obj]) for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(spread))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_noise_is_in_box_units_then_clamped(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and p.sigma == SEVERITIES[severity - 1].sigma
    out = gaussian_obj(demo_scan, p, rng_for(severity))
    clamped = 0
    for j, idx in enumerate(demo_scan.box_points):
        before, after = unit_coords(demo_scan, j), unit_coords(demo_scan, j, out.xyz[idx])
        if abs(np.abs(after).max() - 1) <= 1e-5:  # clamped: touches the ±1 cube
            clamped += 1
            m = shrink_factor(before, after)
        else:
            m = 1.0
        if len(idx) >= 100:
            assert (after * m - before).std() == pytest.approx(p.sigma, rel=0.15)  # σ in box units
    # Gaussian tails leave the cube for the cars whose points reach the box's long ends
    assert clamped >= 1
