"""uniform_rad: r' = r + U(−a, a) along each point's own ray (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.noise.uniform_rad import UniformRadParams, uniform_rad
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("uniform_rad").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("uniform_rad").params  # the released generator (the default)


def _range(frame):
    return np.linalg.norm(frame.xyz.astype(np.float64), axis=1)


def test_recipe_values_are_the_papers():
    assert [p.half_width for p in SEVERITIES] == [0.04, 0.08, 0.12, 0.16, 0.20]


def test_zero_width_is_identity(scene):
    out = uniform_rad(scene, UniformRadParams(0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points)


def test_rejects_negative(scene):
    with pytest.raises(ValueError, match="half_width"):
        uniform_rad(scene, UniformRadParams(-0.1), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_range_noise_is_uniform_with_papers_bounds(scene_with_ring, severity):
    p = SEVERITIES[severity - 1]
    a = p.half_width
    out = uniform_rad(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene_with_ring)
    dr = _range(out) - _range(scene_with_ring)
    assert np.all(np.abs(dr) <= a + 1e-4)
    assert dr.std() == pytest.approx(a / np.sqrt(3), rel=0.02)
    assert abs(dr.mean()) < 0.02 * a
    # fills the whole interval, not just a part of it
    assert dr.min() < -0.98 * a and dr.max() > 0.98 * a
    # along the ray: direction unchanged; intensity and ring untouched
    u0 = scene_with_ring.xyz / np.linalg.norm(scene_with_ring.xyz, axis=1, keepdims=True)
    u1 = out.xyz / np.linalg.norm(out.xyz, axis=1, keepdims=True)
    assert np.max(np.abs(u1 - u0)) < 1e-5
    assert np.array_equal(out.points[:, 3:], scene_with_ring.points[:, 3:])


def test_effect_grows_with_severity(scene):
    stds = [(_range(uniform_rad(scene, p, rng_for(7))) - _range(scene)).std() for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(stds))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_range_change_is_uniform_within_a_sqrt3(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and p.half_width == SEVERITIES[severity - 1].half_width
    r0 = np.linalg.norm(demo_scan.xyz.astype(np.float64), axis=1)
    dr = np.linalg.norm(uniform_rad(demo_scan, p, rng_for(severity)).xyz.astype(np.float64), axis=1) - r0
    bound = p.half_width * np.sqrt(3.0)  # U(−a, a)·√3 in the released code
    assert np.abs(dr).max() <= bound + 1e-4
    assert np.abs(dr).max() > 0.999 * bound
    assert dr.std() == pytest.approx(bound / np.sqrt(3.0), rel=0.015)  # std of U(−b, b) = b/√3
