"""object_rotate: Euler angles ~ U(−θ, θ), R = Rz·Ry·Rx applied as P·R (ModelNet-C Appendix A.3)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.whole_shape.object_rotate import ObjectRotateParams, euler_matrix, object_rotate
from tests.stages.objects import ROTATE_DEG, make_object, rng_for, snapshot, unchanged


def test_paper_angles_are_pi_fractions():
    np.testing.assert_allclose(np.deg2rad(ROTATE_DEG), [np.pi / 30, np.pi / 15, np.pi / 10, np.pi / 7.5, np.pi / 6])


def test_zero_angle_is_identity():
    shape = make_object()
    np.testing.assert_array_equal(object_rotate(shape, ObjectRotateParams(0.0), rng_for(0)).points, shape.points)


def test_euler_matrix_is_z_y_x():
    a, b, g = 0.1, -0.2, 0.3
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(g), -np.sin(g), 0], [np.sin(g), np.cos(g), 0], [0, 0, 1]])
    np.testing.assert_allclose(euler_matrix(a, b, g), rz @ ry @ rx)


@pytest.mark.parametrize("level", range(5))
def test_rotation_recovered_from_the_output(level):
    theta = ROTATE_DEG[level]
    shape = make_object(level)
    snap = snapshot(shape)
    angles = []
    for seed in range(300):
        out = object_rotate(shape, ObjectRotateParams(theta), rng_for(seed))
        ang = np.array(out.info["euler_deg"])
        angles.append(ang)
        if seed < 5:
            # the rigid map from input to output, by least squares, is P·R with R = Rz·Ry·Rx(angles)
            m, *_ = np.linalg.lstsq(shape.xyz.astype(np.float64), out.xyz.astype(np.float64), rcond=None)
            np.testing.assert_allclose(m, euler_matrix(*np.deg2rad(ang)), atol=2e-6)
            assert np.linalg.det(m) == pytest.approx(1.0, abs=1e-5)
            np.testing.assert_allclose(np.linalg.norm(out.xyz, axis=1), np.linalg.norm(shape.xyz, axis=1), atol=1e-6)
    a = np.concatenate(angles)
    assert np.abs(a).max() <= theta
    assert abs(a.var() - theta**2 / 3) < 5 * theta**2 * np.sqrt(4 / 45 / len(a))  # U(−θ, θ): var θ²/3
    assert unchanged(shape, snap)
