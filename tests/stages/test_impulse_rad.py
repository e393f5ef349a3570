"""impulse_rad: ⌊N/d⌋ points get r ± 0.2 m exactly (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.noise.impulse_rad import ImpulseRadParams, impulse_rad
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("impulse_rad").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("impulse_rad").params  # the released generator (the default)


def _range(frame):
    return np.linalg.norm(frame.xyz.astype(np.float64), axis=1)


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [30, 25, 20, 15, 10]
    assert all(p.magnitude == 0.2 for p in SEVERITIES)


@pytest.mark.parametrize("params", [ImpulseRadParams(math.inf), ImpulseRadParams(10, magnitude=0.0)])
def test_zero_strength_is_identity(scene, params):
    out = impulse_rad(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


def test_count_rounding_to_zero_is_identity(scene):
    out = impulse_rad(scene.take(np.arange(5)), ImpulseRadParams(10), rng_for(0))
    assert np.array_equal(out.points, scene.points[:5])


@pytest.mark.parametrize("params", [ImpulseRadParams(0), ImpulseRadParams(-5), ImpulseRadParams(10, magnitude=-0.2)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="impulse_rad"):
        impulse_rad(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_exact_count_and_magnitude(scene_with_ring, severity):
    p = SEVERITIES[severity - 1]
    n = len(scene_with_ring)
    out = impulse_rad(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == n
    changed = np.any(out.points != scene_with_ring.points, axis=1)
    assert changed.sum() == n // p.count_divisor
    dr = _range(out)[changed] - _range(scene_with_ring)[changed]
    assert np.allclose(np.abs(dr), 0.2, atol=5e-5)
    frac_pos = np.mean(dr > 0)
    assert 0.45 < frac_pos < 0.55  # fair sign, ≥ 1683 draws: ±5 % is > 4 σ
    # along the ray, attributes kept
    u0 = scene_with_ring.xyz[changed] / _range(scene_with_ring)[changed, None]
    u1 = out.xyz[changed] / _range(out)[changed, None]
    assert np.max(np.abs(u1 - u0)) < 1e-5
    assert np.array_equal(out.points[:, 3:], scene_with_ring.points[:, 3:])


def test_effect_grows_with_severity(scene):
    counts = [np.any(impulse_rad(scene, p, rng_for(1)).points != scene.points, axis=1).sum() for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(counts))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_moves_n_over_d_points_by_0_4_sqrt3(demo_scan, severity):
    p = CODE[severity - 1]
    assert (p.rule, p.magnitude, p.count_divisor) == ("code", 0.4, SEVERITIES[severity - 1].count_divisor)
    r0 = np.linalg.norm(demo_scan.xyz.astype(np.float64), axis=1)
    dr = np.linalg.norm(impulse_rad(demo_scan, p, rng_for(severity)).xyz.astype(np.float64), axis=1) - r0
    hit = np.abs(dr) > 1e-3
    assert hit.sum() == len(demo_scan) // int(p.count_divisor)
    assert np.abs(np.abs(dr[hit]) - 0.4 * np.sqrt(3.0)).max() < 1e-4  # ±0.693 m
    assert np.mean(dr[hit] > 0) == pytest.approx(0.5, abs=0.05)
