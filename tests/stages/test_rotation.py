"""rotation: objects rotate about their box's vertical axis by ±U(lo, hi) degrees (Li et al. Appendix C-B)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.kernels.boxes import points_in_box_frame
from bench_build.stages.kernels.spherical import wrap_angle
from bench_build.stages.per_box.rotation import RotationParams, rotation
from tests.stages.conftest import assert_only_boxes_moved, expected_alpha, make_scene, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("rotation").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("rotation").params  # the released generator (the default)



def test_recipe_values_are_the_papers():
    assert [(p.min_degrees, p.max_degrees) for p in SEVERITIES] == [(0, 2), (3, 4), (5, 6), (7, 8), (9, 10)]


def test_zero_is_identity(scene):
    out = rotation(scene, RotationParams(0.0, 0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points) and out.boxes is scene.boxes


@pytest.mark.parametrize("params", [RotationParams(-1, 2), RotationParams(5, 4), RotationParams(0, 200)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="rotation"):
        rotation(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_rotation_angle_points_and_box(scene, severity):
    p = SEVERITIES[severity - 1]
    out = rotation(scene, p, rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene)
    b, nb = scene.boxes, out.boxes
    for j in range(3):
        theta = wrap_angle(nb.heading[j] - b.heading[j])
        assert p.min_degrees - 1e-9 <= np.degrees(abs(theta)) <= p.max_degrees + 1e-9
        assert -np.pi <= nb.heading[j] < np.pi
        obj = scene.box_index == j
        rel_old = scene.xyz[obj].astype(np.float64) - b.center[j]
        rel_new = out.xyz[obj].astype(np.float64) - nb.center[j]
        assert np.allclose(np.linalg.norm(rel_new, axis=1), np.linalg.norm(rel_old, axis=1), atol=2e-5)
        assert np.allclose(rel_new[:, 2], rel_old[:, 2], atol=2e-6)
        turn = wrap_angle(np.arctan2(rel_new[:, 1], rel_new[:, 0]) - np.arctan2(rel_old[:, 1], rel_old[:, 0]))
        far = np.linalg.norm(rel_old[:, :2], axis=1) > 0.2  # float32 blurs angles of points near the axis
        assert far.sum() > 1000 and np.allclose(turn[far], theta, atol=1e-4)  # all turned by the box's angle
        local = points_in_box_frame(out.xyz[obj], nb.center[j], nb.heading[j])
        assert np.all(np.abs(local) <= nb.dims[j] / 2 + 1e-5)
    assert np.array_equal(nb.center, b.center) and np.array_equal(nb.dims, b.dims)
    assert_only_boxes_moved(scene, out)
    # alpha follows the new heading: moved by −θ from the old geometry's
    old_alpha = expected_alpha(b, scene.calib)[:3]
    assert np.allclose(wrap_angle(nb.alpha[:3] - old_alpha), -wrap_angle(nb.heading[:3] - b.heading[:3]), atol=1e-9)


def test_both_directions_occur(scene):
    signs = [np.sign(wrap_angle(rotation(scene, SEVERITIES[2], rng_for(s)).boxes.heading[:3] - scene.boxes.heading[:3]))
             for s in range(8)]
    assert 0.25 < (np.concatenate(signs) > 0).mean() < 0.75


def test_effect_grows_with_severity(scene):
    obj = scene.box_index >= 0
    moved = [np.abs(rotation(scene, p, rng_for(1)).xyz[obj] - scene.xyz[obj]).mean() for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(moved))


# ---- released-generator parity (the default kitti-c) ------------------------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_table_is_c_plus_minus_one_degree(severity):
    p = CODE[severity - 1]
    c = [1, 3, 5, 7, 9][severity - 1]  # the released code: U(c − 1, c + 1) degrees, random sign
    assert (p.min_degrees, p.max_degrees) == (c - 1, c + 1)
    scene = make_scene(0)
    valid = scene.boxes.valid
    turns = np.concatenate([
        np.degrees(wrap_angle(rotation(scene, p, rng_for(seed)).boxes.heading[valid] - scene.boxes.heading[valid]))
        for seed in range(40)])
    assert np.abs(turns).min() >= c - 1 - 1e-6 and np.abs(turns).max() <= c + 1 + 1e-6
    assert np.abs(turns).mean() == pytest.approx(c, abs=0.25)
