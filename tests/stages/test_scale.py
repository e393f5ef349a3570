"""scale: one box axis of every object scaled by 1 ± s, bottom kept for height (Li et al. Appendix C-B)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.kernels.boxes import points_in_box_frame
from bench_build.stages.per_box.scale import ScaleParams, scale
from tests.stages.conftest import assert_only_boxes_moved, rng_for

SEVERITIES = load_recipe("kitti-c").corruption("scale").params



def _axis_fits(scene, out, j):
    """Per box axis (factor, offset) with new = factor · old + offset, in the original box frame."""
    obj = scene.box_index == j
    b = scene.boxes
    old = points_in_box_frame(scene.xyz[obj], b.center[j], b.heading[j])
    new = points_in_box_frame(out.xyz[obj], b.center[j], b.heading[j])
    fits = []
    for a in range(3):
        design = np.stack([old[:, a], np.ones(len(old))], axis=1)
        (f, t), *_ = np.linalg.lstsq(design, new[:, a], rcond=None)
        assert np.abs(design @ [f, t] - new[:, a]).max() < 1e-4
        fits.append((f, t))
    return np.array(fits)


def test_recipe_values_are_the_papers():
    assert [p.change for p in SEVERITIES] == [0.04, 0.08, 0.12, 0.16, 0.20]


def test_zero_is_identity(scene):
    out = scale(scene, ScaleParams(0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points) and out.boxes is scene.boxes


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan")])
def test_rejects_bad_params(scene, bad):
    with pytest.raises(ValueError, match="scale"):
        scale(scene, ScaleParams(bad), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_one_axis_scaled_and_box_updated(scene, severity):
    p = SEVERITIES[severity - 1]
    axes_seen, signs_seen = set(), set()
    for seed in range(6):
        out = scale(scene, p, rng_for(10 * severity + seed))
        assert out.points.dtype == np.float32 and len(out) == len(scene)
        b, nb = scene.boxes, out.boxes
        for j in range(3):
            fits = _axis_fits(scene, out, j)
            scaled = np.flatnonzero(np.abs(fits[:, 0] - 1) > 1e-6)
            assert len(scaled) == 1  # exactly one axis
            a = int(scaled[0])
            f = fits[a, 0]
            assert np.isclose(abs(f - 1), p.change, atol=1e-5)
            axes_seen.add(a)
            signs_seen.add(np.sign(f - 1))
            expected = b.dims[j].copy()
            expected[a] *= f
            assert np.allclose(nb.dims[j], expected, atol=1e-6)
            assert nb.heading[j] == b.heading[j]
            if a == 2:  # box bottom unchanged, points and box shifted by the same amount
                bottom_old = b.center[j, 2] - b.dims[j, 2] / 2
                assert np.isclose(nb.center[j, 2] - nb.dims[j, 2] / 2, bottom_old, atol=1e-9)
                assert np.isclose(fits[2, 1], (f - 1) * b.dims[j, 2] / 2, atol=1e-4)
            else:
                assert np.array_equal(nb.center[j], b.center[j]) and abs(fits[a, 1]) < 1e-4
            assert np.allclose(nb.center[j, :2], b.center[j, :2])
            local = points_in_box_frame(out.xyz[scene.box_index == j], nb.center[j], nb.heading[j])
            assert np.all(np.abs(local) <= nb.dims[j] / 2 + 1e-5)  # points inside the new box
        assert_only_boxes_moved(scene, out)
    assert axes_seen == {0, 1, 2} and signs_seen == {-1.0, 1.0}


def test_effect_grows_with_severity(scene):
    obj = scene.box_index >= 0
    moved = [
        np.mean([np.abs(scale(scene, p, rng_for(s)).xyz[obj] - scene.xyz[obj]).mean() for s in range(4)])
        for p in SEVERITIES
    ]
    assert all(b > a for a, b in pairwise(moved))


