"""object_add_global: K points uniform in the unit ball appended (ModelNet-C Appendix A.6)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.frame import PointTag
from bench_build.stages.whole_shape.object_add_global import ObjectAddGlobalParams, object_add_global
from tests.stages.objects import ADD_GLOBAL_K, make_object, rng_for, snapshot, unchanged


def test_zero_points_is_identity():
    shape = make_object()
    out = object_add_global(shape, ObjectAddGlobalParams(0), rng_for(0))
    np.testing.assert_array_equal(out.points, shape.points)


@pytest.mark.parametrize("level", range(5))
def test_added_points_inside_the_unit_sphere(level):
    k = ADD_GLOBAL_K[level]
    shape = make_object(level)
    snap = snapshot(shape)
    out = object_add_global(shape, ObjectAddGlobalParams(k), rng_for(level))
    assert len(out) == 1024 + k and out.attrs == shape.attrs
    np.testing.assert_array_equal(out.points[:1024], shape.points)  # originals first, unchanged
    assert (out.point_tag[:1024] == PointTag.CLEAN).all() and (out.point_tag[1024:] == PointTag.SYNTHETIC).all()
    assert (np.linalg.norm(out.xyz[1024:].astype(np.float64), axis=1) <= 1.0 + 1e-6).all()
    assert unchanged(shape, snap)


def test_uniform_in_the_ball():
    """Uniform in volume: P(r < t) = t³ and each octant equally likely (pooled over many examples)."""
    shape = make_object()
    pts = np.concatenate([object_add_global(shape, ObjectAddGlobalParams(50), rng_for(s)).xyz[1024:]
                          for s in range(400)]).astype(np.float64)
    r = np.linalg.norm(pts, axis=1)
    for t in (0.5, 0.8):
        p = t**3
        assert abs((r < t).mean() - p) < 5 * np.sqrt(p * (1 - p) / len(r))
    octant = (pts > 0) @ np.array([1, 2, 4])
    freq = np.bincount(octant, minlength=8) / len(r)
    assert np.abs(freq - 1 / 8).max() < 5 * np.sqrt(1 / 8 * 7 / 8 / len(r))
