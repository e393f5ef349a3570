"""object_sample: first-N (ModelNet-C) or seeded random N + unit-sphere normalisation (3DOS loaders)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.whole_shape.object_sample import ObjectSampleParams, object_sample
from tests.stages.objects import make_object, rng_for, snapshot, unchanged


def test_first_keeps_the_first_points_unchanged():
    shape = make_object(n=2048)
    out = object_sample(shape, ObjectSampleParams(1024, method="first", normalize="none"), rng_for(0))
    np.testing.assert_array_equal(out.points, shape.points[:1024])
    with pytest.raises(ValueError, match="fewer than"):
        object_sample(make_object(n=100), ObjectSampleParams(1024, method="first"), rng_for(0))


def test_random_draw_without_replacement_and_unit_sphere():
    shape = make_object(n=4096)
    big = shape.with_points(shape.points * 3 + 0.5)  # off-centre and too large
    snap = snapshot(big)
    seen = np.zeros(4096)
    for s in range(100):
        out = object_sample(big, ObjectSampleParams(1024), rng_for(s))
        assert len(out) == 1024 and out.attrs == big.attrs
        xyz = out.xyz.astype(np.float64)
        assert np.abs(xyz.mean(axis=0)).max() < 1e-6
        assert np.linalg.norm(xyz, axis=1).max() == pytest.approx(1.0, abs=1e-6)
        # the same draw without normalisation is 1,024 distinct input points
        picked = np.flatnonzero(np.isin(big.xyz.view([("", np.float32)] * 3).ravel(),
                                        object_sample(big, ObjectSampleParams(1024, normalize="none"), rng_for(s))
                                        .xyz.view([("", np.float32)] * 3).ravel()))
        assert len(picked) == 1024
        seen[picked] += 1
    p = 1024 / 4096
    assert np.abs(seen / 100 - p).max() < 5 * np.sqrt(p * (1 - p) / 100)
    assert unchanged(big, snap)


def test_real_scans_keep_2048_points_with_their_mask():
    scan = make_object(n=2048, domain="real")
    scan = scan.with_points(scan.points, mask=(np.arange(2048) % 3 == 0).astype(np.uint8))
    out = object_sample(scan, ObjectSampleParams(1024, real_num_points=2048), rng_for(0))
    assert len(out) == 2048 and out.labels["mask"].sum() == scan.labels["mask"].sum()
    assert len(object_sample(make_object(n=2048), ObjectSampleParams(1024, real_num_points=2048), rng_for(0))) == 1024


def test_cube_variant_has_max_abs_coordinate_one():
    out = object_sample(make_object(n=4096), ObjectSampleParams(1024, normalize="cube"), rng_for(0))
    assert np.abs(out.xyz.astype(np.float64)).max() == pytest.approx(1.0, abs=1e-6)
