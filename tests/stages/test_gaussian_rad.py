"""gaussian_rad: r' = r + N(0, σ²) along each point's own ray (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.kernels.spherical import to_spherical, wrap_angle
from bench_build.stages.noise.gaussian_rad import GaussianRadParams, gaussian_rad
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("gaussian_rad").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("gaussian_rad").params  # the released generator (the default)


def _range(frame):
    return np.linalg.norm(frame.xyz.astype(np.float64), axis=1)


def test_recipe_values_are_the_papers():
    assert [p.sigma for p in SEVERITIES] == [0.04, 0.06, 0.08, 0.10, 0.12]


def test_zero_sigma_is_identity(scene):
    out = gaussian_rad(scene, GaussianRadParams(0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points)
    assert np.array_equal(out.boxes.center, scene.boxes.center)
    assert np.array_equal(out.boxes.heading, scene.boxes.heading)


def test_rejects_negative_sigma(scene):
    with pytest.raises(ValueError, match="sigma"):
        gaussian_rad(scene, GaussianRadParams(-0.01), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_range_noise_is_gaussian_with_papers_sigma(scene_with_ring, severity):
    p = SEVERITIES[severity - 1]
    sigma = p.sigma
    out = gaussian_rad(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene_with_ring)
    dr = _range(out) - _range(scene_with_ring)
    assert dr.std() == pytest.approx(sigma, rel=0.03)
    assert abs(dr.mean()) < 0.03 * sigma  # ≈ 6 standard errors at N ≈ 50k
    # Gaussian, not uniform or impulse: ≈ 68.3 % within 1σ and ≈ 95.4 % within 2σ
    assert np.mean(np.abs(dr) <= sigma) == pytest.approx(0.6827, abs=0.01)
    assert np.mean(np.abs(dr) <= 2 * sigma) == pytest.approx(0.9545, abs=0.006)
    # every point is perturbed (no subset left clean)
    assert np.mean(np.abs(dr) > 1e-5) > 0.999
    # azimuth and elevation unchanged
    _, az0, el0 = to_spherical(scene_with_ring.xyz)
    _, az1, el1 = to_spherical(out.xyz)
    assert np.max(np.abs(wrap_angle(az1 - az0))) < 1e-5
    assert np.max(np.abs(el1 - el0)) < 1e-5
    # intensity and ring untouched; boxes and calibration kept
    assert np.array_equal(out.points[:, 3:], scene_with_ring.points[:, 3:])
    assert np.array_equal(out.boxes.center, scene_with_ring.boxes.center)
    assert np.array_equal(out.boxes.dims, scene_with_ring.boxes.dims)
    assert out.calib is scene_with_ring.calib


def test_effect_grows_with_severity(scene):
    stds = [(_range(gaussian_rad(scene, p, rng_for(7))) - _range(scene)).std() for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(stds))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_range_sigma_is_sigma_times_sqrt3(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and p.sigma == SEVERITIES[severity - 1].sigma
    dr = _range(gaussian_rad(demo_scan, p, rng_for(severity))) - _range(demo_scan)
    want = p.sigma * np.sqrt(3.0)  # the released code adds N(0, 1)·σ·√3 to the range
    assert dr.std() == pytest.approx(want, rel=0.015)  # ≈ 4 standard errors of a std at N = 131k
    assert abs(dr.mean()) < 0.015 * want
    assert np.mean(np.abs(dr) <= want) == pytest.approx(0.6827, abs=0.006)
