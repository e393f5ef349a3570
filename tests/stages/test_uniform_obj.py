"""uniform_obj: object points += U(−a, a) per axis (Li et al. Appendix C-B)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.per_box.uniform_obj import UniformObjParams, uniform_obj
from tests.stages.conftest import rng_for, shrink_factor, unit_coords

SEVERITIES = load_recipe("kitti-c:text").corruption("uniform_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("uniform_obj").params  # the released generator (the default)


def test_recipe_values_are_the_papers():
    assert [p.half_width for p in SEVERITIES] == [0.02, 0.04, 0.06, 0.08, 0.10]


def test_zero_is_identity(scene):
    out = uniform_obj(scene, UniformObjParams(0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points) and out.boxes is scene.boxes


@pytest.mark.parametrize("bad", [-0.01, float("nan")])
def test_rejects_bad_params(scene, bad):
    with pytest.raises(ValueError, match="uniform_obj"):
        uniform_obj(scene, UniformObjParams(bad), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_object_deltas_are_uniform(scene, severity):
    a = SEVERITIES[severity - 1].half_width
    out = uniform_obj(scene, SEVERITIES[severity - 1], rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene)
    obj = scene.box_index >= 0
    delta = out.xyz[obj].astype(np.float64) - scene.xyz[obj]
    assert np.all(np.abs(delta) <= a + 1e-5)
    assert np.allclose(delta.std(axis=0), a / np.sqrt(3), rtol=0.05)
    assert np.allclose(delta.mean(axis=0), 0.0, atol=0.05 * a)
    assert np.abs(np.corrcoef(delta.T) - np.eye(3)).max() < 0.1  # independent axes
    # everything else untouched: background, attributes, boxes (DontCare row included)
    assert np.array_equal(out.points[~obj], scene.points[~obj])
    assert np.array_equal(out.points[:, 3:], scene.points[:, 3:])
    assert out.boxes is scene.boxes


def test_effect_grows_with_severity(scene):
    obj = scene.box_index >= 0
    spread = [np.abs(uniform_obj(scene, p, rng_for(1)).xyz[obj] - scene.xyz[obj]).mean() for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(spread))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_noise_is_in_box_units_then_clamped(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and p.half_width == SEVERITIES[severity - 1].half_width
    out = uniform_obj(demo_scan, p, rng_for(severity))
    c = p.half_width
    outside = np.ones(len(demo_scan), dtype=bool)
    for j, idx in enumerate(demo_scan.box_points):
        outside[idx] = False
        before, after = unit_coords(demo_scan, j), unit_coords(demo_scan, j, out.xyz[idx])
        if abs(np.abs(after).max() - 1) > 1e-5:  # not clamped: the displacement is U(−c, c) box units
            m = 1.0
            assert np.abs(after - before).max() <= c + 1e-5
        else:  # clamped: the object touches the ±1 cube, shrunk by M = max|p + noise| ≤ max|p| + c
            m = shrink_factor(before, after)
            assert 1 - 0.01 < m <= np.abs(before).max() + c + 0.01
        noise = after * m - before
        if len(idx) >= 100:
            assert noise.std() == pytest.approx(c / np.sqrt(3), rel=0.15)
            # in metres: max(l, w, h)/2 per unit, i.e. ≈ 2 × the text's displacement for a car
            metres = np.abs(out.xyz[idx].astype(np.float64) - demo_scan.xyz[idx]).mean()
            assert metres > 0.8 * (c / 2) * demo_scan.boxes.dims[j].max() / 2 / m
    assert np.array_equal(out.points[outside], demo_scan.points[outside])
