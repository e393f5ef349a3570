"""beam_missing: delete every point of K ring ids drawn with replacement from 4..58 (Robo3D)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.kitti import generate_frame
from bench_build.stages.density.beam_missing import BeamMissingParams, beam_missing, draw_beams
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("robo3d-kitti-c").corruption("beam_missing").params
EXPECTED_DISTINCT = [14.0, 24.4, 32.2]  # 55·(1 − (54/55)^K): K draws with replacement from 55 rings


def _with_row_ids(frame):
    return replace(frame, labels={**frame.labels, "row": np.arange(len(frame), dtype=np.int64)})


@pytest.fixture(scope="module")
def demo():
    """A raw-order demo scan (ring by ring, CCW sweeps) with a ring column and row ids."""
    return _with_row_ids(generate_frame(0, azimuth_step_deg=0.36))


@pytest.fixture(scope="module")
def demo_no_ring(demo):
    return replace(demo, points=np.ascontiguousarray(demo.points[:, :4]), fields=demo.fields[:4])


def test_recipe_values_are_the_papers():
    assert [p.beams for p in SEVERITIES] == [16, 32, 48]
    assert all((p.ring_low, p.ring_high, p.replace) == (4, 58, True) for p in SEVERITIES)
    assert {p.ring_method for p in SEVERITIES} == {"auto"}


def test_zero_beams_is_identity(demo):
    assert beam_missing(demo, BeamMissingParams(0), rng_for(0)) is demo


@pytest.mark.parametrize("kw", [{"beams": -1}, {"beams": 4, "ring_low": 10, "ring_high": 5},
                                {"beams": 4, "ring_low": -1}, {"beams": 56, "replace": False},
                                {"beams": 4, "ring_method": "guess"}])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError, match="beam_missing"):
        BeamMissingParams(**kw)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_deletes_exactly_the_drawn_rings(demo, severity):
    p = SEVERITIES[severity - 1]
    ring = demo.column("ring").astype(np.int64)
    assert len(np.unique(ring)) == 64  # every ring is populated
    drawn = draw_beams(p, rng_for(severity))  # the stage's first draw from the same stream
    out = beam_missing(demo, p, rng_for(severity))
    kept = out.labels["row"]
    assert out.points.dtype == np.float32
    assert np.all(np.diff(kept) > 0) and np.array_equal(out.points, demo.points[kept])
    removed = np.ones(len(demo), dtype=bool)
    removed[kept] = False
    assert np.array_equal(removed, np.isin(ring, drawn))  # deleted = exactly the points of the drawn rings
    assert set(np.unique(ring[removed])) == set(drawn.tolist())
    assert np.all((drawn >= 4) & (drawn <= 58))
    assert out.info["ring_method"] == "column"
    assert out.boxes is demo.boxes


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_expected_distinct_beams(severity):
    """With replacement, K draws over 55 rings hit 14.0 / 24.4 / 32.2 distinct rings on average."""
    p = SEVERITIES[severity - 1]
    distinct = np.array([len(np.unique(draw_beams(p, rng_for(10_000 + i)))) for i in range(4000)])
    assert abs(distinct.mean() - EXPECTED_DISTINCT[severity - 1]) < 0.1
    assert distinct.max() <= p.beams


def test_stage_distinct_rings_match_expectation(demo):
    p = SEVERITIES[1]
    ring = demo.column("ring").astype(np.int64)
    n = [len(np.setdiff1d(np.unique(ring), np.unique(beam_missing(demo, p, rng_for(i)).column("ring"))))
         for i in range(60)]
    assert abs(np.mean(n) - EXPECTED_DISTINCT[1]) < 4 * np.std(n) / np.sqrt(len(n)) + 0.1


def test_without_replacement_deletes_exactly_k_rings(demo):
    p = BeamMissingParams(32, replace=False)
    for i in range(5):
        out = beam_missing(demo, p, rng_for(i))
        assert 64 - len(np.unique(out.column("ring"))) == 32


def test_ring_recovery_without_ring_column(demo, demo_no_ring):
    """On a raw-order scan without ring column `auto` recovers the rings by azimuth wrap: same result."""
    p = SEVERITIES[2]
    a = beam_missing(demo, p, rng_for(5))
    b = beam_missing(demo_no_ring, p, rng_for(5))
    assert np.array_equal(a.labels["row"], b.labels["row"])
    assert b.info["ring_method"] == "azimuth_wrap"
    c = beam_missing(demo_no_ring, replace(p, ring_method="laser_table"), rng_for(5))
    assert c.info["ring_method"] == "laser_table"


def test_effect_grows_with_severity(demo):
    removed = [np.mean([len(demo) - len(beam_missing(demo, p, rng_for(i))) for i in range(20)]) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(removed))


