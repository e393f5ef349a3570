"""beam_del: delete ⌊N/d⌋ random points, d = 100, 30, 10, 5, 3 (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.density.beam_del import BeamDelParams, beam_del
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("kitti-c").corruption("beam_del").params


def _with_row_ids(frame):
    """The frame with a ``row`` label column (input row index) that `Frame.take` carries along."""
    return replace(frame, labels={**frame.labels, "row": np.arange(len(frame), dtype=np.int64)})


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [100, 30, 10, 5, 3]


def test_infinite_divisor_is_identity(scene):
    out = beam_del(scene, BeamDelParams(math.inf), rng_for(0))
    assert np.array_equal(out.points, scene.points)
    assert np.array_equal(out.boxes.center, scene.boxes.center)
    assert np.array_equal(out.boxes.heading, scene.boxes.heading)


@pytest.mark.parametrize("bad", [0.0, -3.0])
def test_rejects_non_positive_divisor(scene, bad):
    with pytest.raises(ValueError, match="count_divisor"):
        beam_del(scene, BeamDelParams(bad), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_drops_exactly_floor_n_over_d_as_order_preserving_subset(scene_with_ring, severity):
    p = SEVERITIES[severity - 1]
    frame = _with_row_ids(scene_with_ring)
    n = len(frame)
    out = beam_del(frame, p, rng_for(severity))
    assert n - len(out) == n // p.count_divisor == math.floor(n / p.count_divisor)
    rows = out.labels["row"]
    assert np.all(np.diff(rows) > 0)  # strictly increasing: a subset, original order kept
    assert np.array_equal(out.points, frame.points[rows])  # rows themselves untouched (all columns)
    # the deleted points are spread over the whole scan, not a block of it
    dropped = np.setdiff1d(np.arange(n), rows)
    assert dropped.mean() == pytest.approx(n / 2, rel=0.05)
    car = frame.box_index >= 0
    frac_car = 1 - car[rows].sum() / car.sum()
    assert frac_car == pytest.approx(1 / p.count_divisor, abs=max(0.02, 0.3 / p.count_divisor))
    # boxes and calibration unchanged
    assert np.array_equal(out.boxes.center, frame.boxes.center)
    assert out.calib is frame.calib


def test_effect_grows_with_severity(scene):
    sizes = [len(beam_del(scene, p, rng_for(5))) for p in SEVERITIES]
    assert all(b < a for a, b in itertools.pairwise(sizes))


