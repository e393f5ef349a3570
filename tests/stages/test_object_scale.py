"""object_scale: per-axis factors ~ U(1/s, s), then back into the unit sphere (ModelNet-C Appendix A.2)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.whole_shape.object_scale import ObjectScaleParams, object_scale
from tests.stages.objects import SCALE_S, make_object, rng_for, snapshot, unchanged


def test_unit_scale_without_renormalisation_is_identity():
    shape = make_object()
    out = object_scale(shape, ObjectScaleParams(1.0, renormalize=False), rng_for(0))
    np.testing.assert_array_equal(out.points, shape.points)
    with pytest.raises(ValueError, match="scale"):
        object_scale(shape, ObjectScaleParams(0.5), rng_for(0))


@pytest.mark.parametrize("level", range(5))
def test_factors_are_uniform_in_the_papers_range_and_output_is_renormalised(level):
    s = SCALE_S[level]
    shape = make_object(level)
    snap = snapshot(shape)
    factors = []
    for seed in range(400):
        out = object_scale(shape, ObjectScaleParams(s), rng_for(seed))
        f = np.array(out.info["scale_factors"])
        factors.append(f)
        if seed < 5:  # the output is exactly: scaled, cast to float32, centred, divided by the max norm
            scaled = (shape.xyz.astype(np.float64) * f).astype(np.float32).astype(np.float64)
            scaled -= scaled.mean(axis=0)
            want = scaled / np.linalg.norm(scaled, axis=1).max()
            np.testing.assert_allclose(out.xyz, want, atol=1e-6)
            assert np.linalg.norm(out.xyz.astype(np.float64), axis=1).max() == pytest.approx(1.0, abs=1e-6)
            assert np.abs(out.xyz.astype(np.float64).mean(axis=0)).max() < 1e-6
    f = np.concatenate(factors)
    assert f.min() >= 1 / s and f.max() <= s
    mean, var = (s + 1 / s) / 2, (s - 1 / s) ** 2 / 12  # U(1/s, s)
    assert abs(f.mean() - mean) < 5 * np.sqrt(var / len(f))
    assert unchanged(shape, snap)


def test_anisotropy_grows_with_severity():
    shape = make_object()
    ratio = [np.mean([np.ptp(np.log(object_scale(shape, ObjectScaleParams(s), rng_for(k)).info["scale_factors"]))
                      for k in range(300)]) for s in SCALE_S]
    assert ratio == sorted(ratio)
