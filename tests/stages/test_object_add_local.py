"""object_add_local: K points in C Gaussian clusters around shape points (ModelNet-C Appendix A.7)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.frame import PointTag
from bench_build.stages.whole_shape.object_add_local import ObjectAddLocalParams, object_add_local
from tests.stages.objects import LOCAL_K, make_object, rng_for, snapshot, unchanged


def _sorted_rows(a):
    return sorted(map(tuple, np.asarray(a).tolist()))


def test_zero_points_keeps_the_shape():
    shape = make_object()
    out = object_add_local(shape, ObjectAddLocalParams(0), rng_for(0))
    assert _sorted_rows(out.xyz) == _sorted_rows(shape.xyz)
    with pytest.raises(ValueError):
        object_add_local(shape, ObjectAddLocalParams(10, outside="clip"), rng_for(0))


@pytest.mark.parametrize("level", range(5))
def test_counts_tags_and_inside_the_unit_sphere(level):
    k = LOCAL_K[level]
    shape = make_object(level)
    snap = snapshot(shape)
    out = object_add_local(shape, ObjectAddLocalParams(k), rng_for(level))
    assert len(out) == 1024 + k and out.attrs == shape.attrs and 1 <= out.info["clusters"] <= 7
    assert _sorted_rows(out.xyz[:1024]) == _sorted_rows(shape.xyz)  # the shuffled shape, then the added points
    assert (out.point_tag[1024:] == PointTag.SYNTHETIC).all() and (out.point_tag[:1024] == PointTag.CLEAN).all()
    # released rule: added points beyond the unit sphere are inverted to p/‖p‖², so all end inside it
    assert (np.linalg.norm(out.xyz[1024:].astype(np.float64), axis=1) <= 1.0 + 1e-6).all()
    assert unchanged(shape, snap)


def test_inversion_maps_norm_r_to_one_over_r():
    shape = make_object()
    rng_a, rng_b = rng_for(7), rng_for(7)
    keep = object_add_local(shape, ObjectAddLocalParams(500, outside="keep"), rng_a).xyz[1024:].astype(np.float64)
    inv = object_add_local(shape, ObjectAddLocalParams(500), rng_b).xyz[1024:].astype(np.float64)
    r = np.linalg.norm(keep, axis=1)
    assert (r > 1).any()  # the shape touches the sphere: some cluster points fall outside
    np.testing.assert_allclose(inv[r > 1], keep[r > 1] / (r[r > 1, None] ** 2), rtol=1e-5)
    np.testing.assert_array_equal(inv[r <= 1], keep[r <= 1])


def test_cluster_spread_is_sigma_in_range():
    """One cluster (keep mode): points ~ centre + σ·N(0, I), σ ~ U(0.075, 0.125), centre a shape point."""
    shape = make_object()
    sig = []
    for s in range(200):
        out = object_add_local(shape, ObjectAddLocalParams(500, max_clusters=1, outside="keep"), rng_for(s))
        centre = out.xyz[0].astype(np.float64)  # the first shuffled point is the centre
        d = out.xyz[1024:].astype(np.float64) - centre
        assert np.abs(d.mean(axis=0)).max() < 5 * 0.125 / np.sqrt(500)
        sig.append(d.std())
    sig = np.array(sig)
    assert sig.min() > 0.075 * 0.9 and sig.max() < 0.125 * 1.1
    assert abs(sig.mean() - 0.1) < 0.003  # mean of U(0.075, 0.125)
