"""translation: every annotated object moves horizontally by d ~ U(lo, hi) (Li et al. Appendix C-B)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.geometry import assign_points_to_boxes, lidar_heading_to_rot_y
from bench_build.stages.kernels.spherical import wrap_angle
from bench_build.stages.per_box.translation import TranslationParams, translation
from tests.stages.conftest import BOX_FIELDS, make_scene, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("translation").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("translation").params  # the released generator (the default)


def _shifts(before, after):
    return after.boxes.center - before.boxes.center


def test_recipe_values_are_the_papers():
    ranges = [(p.min_distance, p.max_distance) for p in SEVERITIES]
    assert ranges == [(0.0, 0.2), (0.3, 0.4), (0.5, 0.6), (0.7, 0.8), (0.9, 1.0)]


def test_zero_distance_is_identity(scene):
    out = translation(scene, TranslationParams(0.0, 0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points)
    for f in BOX_FIELDS:
        assert np.array_equal(getattr(out.boxes, f), getattr(scene.boxes, f))


@pytest.mark.parametrize("bad", [(-0.1, 0.2), (0.5, 0.4)])
def test_rejects_bad_range(scene, bad):
    with pytest.raises(ValueError, match="min_distance"):
        translation(scene, TranslationParams(*bad), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_objects_and_their_points_move_together(scene, severity):
    p = SEVERITIES[severity - 1]
    out = translation(scene, p, rng_for(severity))
    valid = scene.boxes.valid
    assert valid.sum() == 3 and len(out.boxes) == len(scene.boxes)
    shift = _shifts(scene, out)
    # horizontal move of a distance in [min, max]; z, size, heading, class unchanged
    assert np.all(shift[valid, 2] == 0)
    dist = np.linalg.norm(shift[valid, :2], axis=1)
    assert np.all(dist >= p.min_distance - 1e-9) and np.all(dist <= p.max_distance + 1e-9)
    assert np.array_equal(out.boxes.dims, scene.boxes.dims)
    assert np.array_equal(out.boxes.heading, scene.boxes.heading)
    assert list(out.boxes.cls) == list(scene.boxes.cls)
    # the DontCare row is untouched in every field
    dc = np.flatnonzero(~valid)
    for f in BOX_FIELDS:
        assert np.array_equal(getattr(out.boxes, f)[dc], getattr(scene.boxes, f)[dc])
    # each object's points move by exactly its box's vector and stay inside the moved box
    owner = scene.box_index
    assert len(out) == len(scene)
    d = out.xyz.astype(np.float64) - scene.xyz.astype(np.float64)
    for j in np.flatnonzero(valid):
        idx = owner == j
        assert idx.sum() > 1000
        assert np.allclose(d[idx], shift[j], atol=1e-5)
        assert np.all(assign_points_to_boxes(out.xyz[idx], out.boxes) == j)
    # everything else (ground, wall) unchanged, as are intensities
    assert np.array_equal(out.points[owner < 0], scene.points[owner < 0])
    assert np.array_equal(out.points[:, 3], scene.points[:, 3])
    # alpha recomputed from the new location: alpha = wrap(rot_y − atan2(x_cam, z_cam))
    calib = scene.calib
    rect = calib.lidar_to_rect(out.boxes.center[valid])
    rot_y = lidar_heading_to_rot_y(out.boxes.heading[valid], calib)
    expected = wrap_angle(rot_y - np.arctan2(rect[:, 0], rect[:, 2]))
    assert np.allclose(wrap_angle(out.boxes.alpha[valid] - expected), 0.0, atol=1e-9)
    assert not np.allclose(out.boxes.alpha[valid], scene.boxes.alpha[valid])
    # the 2D box encloses the projection of the moved centre
    uv = calib.project_rect(rect)
    bb = out.boxes.bbox2d[valid]
    assert np.all((uv[:, 0] >= bb[:, 0]) & (uv[:, 0] <= bb[:, 2]) & (uv[:, 1] >= bb[:, 1]) & (uv[:, 1] <= bb[:, 3]))


def test_direction_is_spread_over_all_headings():
    scene = make_scene(1, n_ground=2000, n_per_car=200)
    angles = []
    for i in range(40):
        s = _shifts(scene, translation(scene, SEVERITIES[4], rng_for(100 + i)))[scene.boxes.valid]
        angles.append(np.arctan2(s[:, 1], s[:, 0]))
    angles = np.concatenate(angles)
    counts = np.histogram(angles, bins=4, range=(-np.pi, np.pi))[0]
    assert counts.min() > 0.1 * len(angles)  # forward, backward, left and right all occur


def test_effect_grows_with_severity(scene):
    valid = scene.boxes.valid
    means = [np.linalg.norm(_shifts(scene, translation(scene, p, rng_for(9)))[valid, :2], axis=1).mean()
             for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(means))


# ---- released-generator parity (the default kitti-c) ------------------------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_shifts_x_and_y_independently(severity):
    p = CODE[severity - 1]
    c = [0.1, 0.3, 0.5, 0.7, 0.9][severity - 1]  # the released code: U(c − 0.1, c + 0.1)·(±1) per axis
    assert p.rule == "code" and (p.min_distance, p.max_distance) == pytest.approx((c - 0.1, c + 0.1))
    scene = make_scene(severity)
    valid = scene.boxes.valid
    shifts, signs = [], []
    for seed in range(40):
        out = translation(scene, p, rng_for(seed))
        d = out.boxes.center[valid] - scene.boxes.center[valid]
        assert np.all(d[:, 2] == 0)
        shifts.append(np.abs(d[:, :2]))
        signs.append(np.sign(d[:, :2]))
    shifts, signs = np.concatenate(shifts), np.concatenate(signs)
    assert shifts.min() >= c - 0.1 - 1e-9 and shifts.max() <= c + 0.1 + 1e-9
    assert shifts.mean() == pytest.approx(c, abs=0.02)
    assert np.mean(signs > 0) == pytest.approx(0.5, abs=0.1)
    dist = np.linalg.norm(shifts, axis=1)
    assert dist.mean() == pytest.approx(np.sqrt(2) * c, abs=0.03 + 0.05 * c)  # ≈ √2·c, not c
