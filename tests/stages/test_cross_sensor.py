"""cross_sensor: delete rings int(arange(1, 64, step)), then keep every 2nd remaining point in file order (Robo3D)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.kitti import generate_frame
from bench_build.stages.density.cross_sensor import CrossSensorParams, cross_sensor, deleted_rings
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("robo3d-kitti-c").corruption("cross_sensor").params
# Robo3D's ring sets, written out independently: 1:64:4, 1:64:2 and int(arange(1, 64, 1.33))
RINGS = [
    list(range(1, 64, 4)),
    list(range(1, 64, 2)),
    [int(1 + i * 1.33) for i in range(48)],
]


@pytest.fixture(scope="module")
def demo():
    f = generate_frame(0, azimuth_step_deg=0.36)
    return replace(f, labels={**f.labels, "row": np.arange(len(f), dtype=np.int64)})


@pytest.fixture(scope="module")
def demo_no_ring(demo):
    return replace(demo, points=np.ascontiguousarray(demo.points[:, :4]), fields=demo.fields[:4])


def test_recipe_values_are_the_papers():
    assert [p.ring_step for p in SEVERITIES] == [4.0, 2.0, 1.33]
    assert all((p.ring_start, p.ring_stop, p.subsample) == (1, 64, 2) for p in SEVERITIES)
    for p, rings in zip(SEVERITIES, RINGS, strict=True):
        assert deleted_rings(p).tolist() == rings
    assert [len(r) for r in RINGS] == [16, 32, 48]
    assert RINGS[2][:8] == [1, 2, 3, 4, 6, 7, 8, 10]  # 1 + 3·1.33 = 4.99 truncates to 4


def test_identity(demo):
    assert cross_sensor(demo, CrossSensorParams(math.inf, subsample=1), rng_for(0)) is demo


@pytest.mark.parametrize("kw", [{"ring_step": 0.0}, {"ring_step": -2.0}, {"ring_step": float("nan")},
                                {"ring_step": 2.0, "subsample": 0}, {"ring_step": 2.0, "ring_start": 70},
                                {"ring_step": 2.0, "ring_method": "guess"}])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError, match="cross_sensor"):
        CrossSensorParams(**kw)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_deleted_rings_gone_and_every_second_survivor_kept(demo, severity):
    p = SEVERITIES[severity - 1]
    ring = demo.column("ring").astype(np.int64)
    out = cross_sensor(demo, p, rng_for(severity))
    remaining = np.flatnonzero(~np.isin(ring, RINGS[severity - 1]))
    expect = remaining[::2]
    assert np.array_equal(out.labels["row"], expect)  # every 2nd remaining point, in order, starting with the first
    assert len(out) == (len(remaining) + 1) // 2
    assert not np.isin(out.column("ring"), RINGS[severity - 1]).any()
    assert set(np.unique(out.column("ring")).astype(int)) == set(range(64)) - set(RINGS[severity - 1])
    assert np.array_equal(out.points, demo.points[expect]) and out.points.dtype == np.float32
    assert out.info["ring_method"] == "column"
    assert out.boxes is demo.boxes


def test_ring_recovery_without_ring_column(demo, demo_no_ring):
    """Without a ring column `auto` uses Robo3D's azimuth-wrap recovery on the raw order: same survivors."""
    for p in SEVERITIES:
        a = cross_sensor(demo, p, rng_for(0))
        b = cross_sensor(demo_no_ring, p, rng_for(0))
        assert np.array_equal(a.labels["row"], b.labels["row"])
        assert b.info["ring_method"] == "azimuth_wrap"


def test_subsample_only(demo):
    out = cross_sensor(demo, CrossSensorParams(math.inf, subsample=2), rng_for(0))
    assert np.array_equal(out.labels["row"], np.arange(len(demo))[::2])
    assert "ring_method" not in out.info  # no ring was needed


def test_effect_grows_with_severity(demo):
    sizes = [len(cross_sensor(demo, p, rng_for(0))) for p in SEVERITIES]
    assert all(b < a for a, b in itertools.pairwise(sizes))
    assert sizes[0] < len(demo) / 2


