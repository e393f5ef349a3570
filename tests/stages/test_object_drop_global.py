"""object_drop_global: keep ⌊N·(1 − ρ)⌋ of a shuffled cloud (ModelNet-C Appendix A.4)."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.whole_shape.object_drop_global import ObjectDropGlobalParams, object_drop_global
from tests.stages.objects import DROP_GLOBAL_RELEASED, DROP_GLOBAL_TEXT, make_object, rng_for, snapshot, unchanged


def test_zero_ratio_keeps_every_point():
    shape = make_object()
    out = object_drop_global(shape, ObjectDropGlobalParams(0.0), rng_for(0))
    assert sorted(map(tuple, out.xyz.tolist())) == sorted(map(tuple, shape.xyz.tolist()))
    with pytest.raises(ValueError, match="ratio"):
        object_drop_global(shape, ObjectDropGlobalParams(1.0), rng_for(0))


@pytest.mark.parametrize("ratios, counts", [(DROP_GLOBAL_RELEASED, [768, 640, 512, 384, 256]),
                                            (DROP_GLOBAL_TEXT, [768, 640, 512, 332, 256])])
def test_counts_and_uniform_choice(ratios, counts):
    shape = make_object()
    snap = snapshot(shape)
    rows = {tuple(r) for r in shape.xyz.tolist()}
    for rho, n in zip(ratios, counts, strict=True):
        assert int(1024 * (1 - rho)) == n
        kept = np.zeros(1024)
        for seed in range(200):
            out = object_drop_global(shape, ObjectDropGlobalParams(rho), rng_for(seed))
            assert len(out) == n and out.attrs == shape.attrs
            if seed < 3:
                assert all(tuple(r) in rows for r in out.xyz.tolist())
            # recover which input rows were kept
            idx = np.flatnonzero(np.isin(shape.xyz.view([("", np.float32)] * 3).ravel(),
                                         out.xyz.view([("", np.float32)] * 3).ravel()))
            kept[idx] += 1
        # each point is kept with probability n/1024: no region is favoured (binomial, 5σ)
        p = n / 1024
        assert np.abs(kept / 200 - p).max() < 5 * np.sqrt(p * (1 - p) / 200)
    assert unchanged(shape, snap)
