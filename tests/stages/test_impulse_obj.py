"""impulse_obj: ⌊N/d⌋ points of each object get ±0.1 m on every axis (Li et al. Appendix C-B)."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.per_box.impulse_obj import ImpulseObjParams, impulse_obj
from tests.stages.conftest import make_scene, rng_for, unit_coords

SEVERITIES = load_recipe("kitti-c:text").corruption("impulse_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("impulse_obj").params  # the released generator (the default)


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [30, 25, 20, 15, 10]
    assert all(p.magnitude == 0.1 for p in SEVERITIES)


@pytest.mark.parametrize("params", [ImpulseObjParams(math.inf), ImpulseObjParams(10, magnitude=0.0)])
def test_zero_strength_is_identity(scene, params):
    out = impulse_obj(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


@pytest.mark.parametrize("params", [ImpulseObjParams(0), ImpulseObjParams(-5), ImpulseObjParams(10, magnitude=-0.1)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="impulse_obj"):
        impulse_obj(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_exact_count_and_magnitude_per_object(severity):
    scene = make_scene(0, n_per_car=1234)  # ⌊1234/d⌋ differs from 1234/d
    p = SEVERITIES[severity - 1]
    out = impulse_obj(scene, p, rng_for(severity))
    assert out.points.dtype == np.float32
    delta = out.xyz.astype(np.float64) - scene.xyz
    changed = np.any(delta != 0, axis=1)
    owner = scene.box_index
    assert not changed[owner < 0].any()
    signs = []
    for j in range(3):
        hit = changed & (owner == j)
        assert hit.sum() == math.floor(np.sum(owner == j) / p.count_divisor)
        assert np.allclose(np.abs(delta[hit]), 0.1, atol=2e-6)  # every axis moved by exactly ±0.1
        signs.append(np.sign(delta[hit]))
    signs = np.concatenate(signs)
    assert np.all(np.abs(signs.mean(axis=0)) < 0.25)  # random signs, both present on each axis
    assert np.array_equal(out.points[:, 3:], scene.points[:, 3:])
    assert out.boxes is scene.boxes


def test_effect_grows_with_severity(scene):
    hits = [np.any(impulse_obj(scene, p, rng_for(1)).points != scene.points, axis=1).sum() for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(hits))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_hits_n_over_d_points_by_0_1_box_units(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and (p.count_divisor, p.magnitude) == (SEVERITIES[severity - 1].count_divisor, 0.1)
    out = impulse_obj(demo_scan, p, rng_for(severity))
    for j, idx in enumerate(demo_scan.box_points):
        before, after = unit_coords(demo_scan, j), unit_coords(demo_scan, j, out.xyz[idx])
        # untouched points only shrink by the common factor M: M = |before| / |after|, the median is theirs
        m = float(np.median(np.linalg.norm(before, axis=1) / np.linalg.norm(after, axis=1)))
        assert m >= 1 - 1e-5
        delta = after * m - before
        hit = np.abs(delta).max(axis=1) > 0.05
        assert hit.sum() == len(idx) // int(p.count_divisor)
        assert np.allclose(np.abs(delta[hit]), 0.1, atol=2e-3)  # ±0.1 box units on every axis
        if m > 1 + 1e-4:
            assert np.abs(after).max() == pytest.approx(1.0, abs=1e-4)  # shrunk to touch the ±1 cube
