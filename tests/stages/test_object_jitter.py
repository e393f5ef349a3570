"""object_jitter: p' = p + σ·N(0, I), ModelNet-C Appendix A.1."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.frame import PointTag
from bench_build.stages.whole_shape.object_jitter import ObjectJitterParams, object_jitter
from tests.stages.objects import JITTER_SIGMA, make_object, rng_for, snapshot, unchanged


def test_zero_sigma_is_identity():
    shape = make_object()
    assert object_jitter(shape, ObjectJitterParams(0.0), rng_for(0)) is shape
    with pytest.raises(ValueError, match="sigma"):
        object_jitter(shape, ObjectJitterParams(-0.1), rng_for(0))


@pytest.mark.parametrize("level", range(5))
def test_displacement_is_gaussian_with_the_papers_sigma(level):
    sigma = JITTER_SIGMA[level]
    shape = make_object(level)
    snap = snapshot(shape)
    d = np.concatenate([(object_jitter(shape, ObjectJitterParams(sigma), rng_for(s)).xyz.astype(np.float64)
                         - shape.xyz) for s in range(20)]).ravel()  # 61,440 coordinates
    se = sigma / np.sqrt(2 * len(d))  # standard error of a Gaussian std estimate
    assert abs(d.std() - sigma) < 5 * se
    assert abs(d.mean()) < 5 * sigma / np.sqrt(len(d))
    assert np.mean(np.abs(d) <= sigma) == pytest.approx(0.6827, abs=0.01)  # Gaussian, not uniform
    assert unchanged(shape, snap)


def test_tags_attrs_and_monotonic():
    shape = make_object()
    spreads = []
    for sigma in JITTER_SIGMA:
        out = object_jitter(shape, ObjectJitterParams(sigma), rng_for(1))
        assert len(out) == 1024 and out.points.dtype == np.float32 and out.attrs == shape.attrs
        assert (out.point_tag == PointTag.JITTER).all()
        spreads.append(np.abs(out.xyz - shape.xyz).mean())
    assert spreads == sorted(spreads)
