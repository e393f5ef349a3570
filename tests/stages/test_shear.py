"""shear: object points p' = A p in the box frame, A = [[1,a,b],[c,1,d],[0,0,1]] (Li et al. Appendix C-B)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.kernels.boxes import points_in_box_frame
from bench_build.stages.per_box.shear import ShearParams, shear
from tests.stages.conftest import assert_only_boxes_moved, make_scene, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("shear").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("shear").params  # the released generator (the default)



def _recovered_matrix(scene, out, j):
    """Least-squares A with new = A · old, both in the original box frame."""
    obj = scene.box_index == j
    b = scene.boxes
    old = points_in_box_frame(scene.xyz[obj], b.center[j], b.heading[j])
    new = points_in_box_frame(out.xyz[obj], b.center[j], b.heading[j])
    at, *_ = np.linalg.lstsq(old, new, rcond=None)
    return at.T, old, new


def test_recipe_values_are_the_papers():
    assert [(p.min_coeff, p.max_coeff) for p in SEVERITIES] == [
        (0.0, 0.10), (0.05, 0.15), (0.10, 0.20), (0.15, 0.25), (0.20, 0.30)
    ]


def test_zero_is_identity(scene):
    out = shear(scene, ShearParams(0.0, 0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points) and out.boxes is scene.boxes


@pytest.mark.parametrize("params", [ShearParams(-0.1, 0.1), ShearParams(0.2, 0.1)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="shear"):
        shear(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_recovered_matrix_and_box(scene, severity):
    p = SEVERITIES[severity - 1]
    out = shear(scene, p, rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene)
    b, nb = scene.boxes, out.boxes
    for j in range(3):
        a_mat, old, new = _recovered_matrix(scene, out, j)
        assert np.abs(new - old @ a_mat.T).max() < 1e-4  # exactly linear in the box frame
        assert np.allclose(np.diag(a_mat), 1.0, atol=1e-5)
        assert np.allclose(a_mat[2], [0.0, 0.0, 1.0], atol=1e-5)
        off = np.abs(a_mat[[0, 0, 1, 1], [1, 2, 0, 2]])
        assert np.all((off >= p.min_coeff - 1e-5) & (off <= p.max_coeff + 1e-5))
        # the box keeps centre, heading and height and encloses the sheared box
        assert np.array_equal(nb.center[j], b.center[j]) and nb.heading[j] == b.heading[j]
        a, bb, c, d = a_mat[0, 1], a_mat[0, 2], a_mat[1, 0], a_mat[1, 2]
        length, width, height = b.dims[j]
        expected = [length + abs(a) * width + abs(bb) * height, abs(c) * length + width + abs(d) * height, height]
        assert np.allclose(nb.dims[j], expected, atol=1e-4)
        local = points_in_box_frame(out.xyz[scene.box_index == j], nb.center[j], nb.heading[j])
        assert np.all(np.abs(local) <= nb.dims[j] / 2 + 1e-5)
    assert_only_boxes_moved(scene, out)
    assert not np.allclose(nb.bbox2d[:3], b.bbox2d[:3])  # the 2D boxes did change


def test_signs_are_random():
    scene = make_scene(0, n_per_car=300)
    coeffs = []
    for s in range(8):
        out = shear(scene, SEVERITIES[2], rng_for(s))
        coeffs += [_recovered_matrix(scene, out, j)[0][[0, 0, 1, 1], [1, 2, 0, 2]] for j in range(3)]
    signs = np.sign(np.concatenate(coeffs))
    assert 0.3 < (signs > 0).mean() < 0.7


def test_effect_grows_with_severity(scene):
    obj = scene.box_index >= 0
    moved = [np.abs(shear(scene, p, rng_for(1)).xyz[obj] - scene.xyz[obj]).mean() for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(moved))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_squeezes_the_sheared_object_into_the_unchanged_box(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and (p.min_coeff, p.max_coeff) == (SEVERITIES[severity - 1].min_coeff,
                                                               SEVERITIES[severity - 1].max_coeff)
    out = shear(demo_scan, p, rng_for(severity))
    b = demo_scan.boxes
    assert np.array_equal(out.boxes.dims, b.dims) and np.array_equal(out.boxes.center, b.center)
    squeezed = 0
    for j, idx in enumerate(demo_scan.box_points):
        local = points_in_box_frame(out.xyz[idx], b.center[j], b.heading[j])
        assert np.all(np.abs(local) <= b.dims[j] / 2 + 1e-4)  # inside the kept box
        before = points_in_box_frame(demo_scan.xyz[idx], b.center[j], b.heading[j])
        assert np.allclose(local[:, 2], before[:, 2], atol=1e-4)  # z' = z, already inside the box
        squeezed += bool(np.any(np.isclose(np.abs(local).max(axis=0), b.dims[j] / 2, atol=1e-4)))
        assert not np.allclose(local, before, atol=1e-3)
    assert squeezed >= 1
