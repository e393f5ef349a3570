"""crosstalk: floor(p·N) points get 3·N(0, 1) on x, y, z and intensity, tagged CROSSTALK (Robo3D)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import PointTag
from bench_build.stages.noise.crosstalk import CrosstalkParams, crosstalk
from tests.stages.conftest import make_scene, rng_for

SEVERITIES = load_recipe("robo3d-kitti-c").corruption("crosstalk").params


@pytest.fixture(scope="module")
def tagged():
    """A scene with a ring column and some points already tagged by an earlier stage."""
    f = make_scene(3, with_ring=True)
    tag = np.zeros(len(f), dtype=np.uint8)
    tag[::7] = PointTag.ATTENUATED
    return f.with_points(f.points, point_tag=tag)


def _changed_rows(a, b):
    return np.flatnonzero(np.any(a.points != b.points, axis=1))


def test_recipe_values_are_the_papers():
    assert [p.fraction for p in SEVERITIES] == [0.006, 0.008, 0.01]
    assert all((p.sigma, p.perturb_intensity, p.clip_intensity) == (3.0, True, False) for p in SEVERITIES)


def test_zero_fraction_is_identity(scene):
    assert crosstalk(scene, CrosstalkParams(0.0), rng_for(0)) is scene
    assert crosstalk(scene, CrosstalkParams(0.5 / len(scene)), rng_for(0)) is scene  # ⌊p·N⌋ = 0


@pytest.mark.parametrize("kw", [{"fraction": -0.1}, {"fraction": 1.5}, {"fraction": float("nan")},
                                {"fraction": 0.01, "sigma": -1.0}])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError, match="crosstalk"):
        CrosstalkParams(**kw)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_exactly_floor_pn_rows_changed_and_tagged(tagged, severity):
    p = SEVERITIES[severity - 1]
    out = crosstalk(tagged, p, rng_for(severity))
    m = math.floor(p.fraction * len(tagged))
    assert len(out) == len(tagged) and out.points.dtype == np.float32
    rows = _changed_rows(out, tagged)
    assert len(rows) == m
    assert np.array_equal(np.flatnonzero(out.point_tag == PointTag.CROSSTALK), rows)
    others = np.setdiff1d(np.arange(len(tagged)), rows)
    assert np.array_equal(out.point_tag[others], tagged.point_tag[others])  # earlier tags kept
    # x, y, z and intensity all changed on those rows; the ring column never
    assert np.all(out.points[rows, :4] != tagged.points[rows, :4])
    assert np.array_equal(out.column("ring"), tagged.column("ring"))
    assert out.boxes is tagged.boxes


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_perturbation_std_is_three(tagged, severity):
    p = SEVERITIES[severity - 1]
    deltas = []
    for i in range(12):
        out = crosstalk(tagged, p, rng_for(100 * severity + i))
        rows = _changed_rows(out, tagged)
        deltas.append(out.points[rows, :4].astype(np.float64) - tagged.points[rows, :4])
    d = np.concatenate(deltas)  # ≥ 3,500 rows per severity
    assert np.allclose(d.std(axis=0), 3.0, rtol=0.05)
    assert np.all(np.abs(d.mean(axis=0)) < 4 * 3.0 / np.sqrt(len(d)))


def test_rows_are_uniform_without_replacement(tagged):
    p = CrosstalkParams(0.05)
    hits = np.zeros(len(tagged))
    for i in range(20):
        hits[_changed_rows(crosstalk(tagged, p, rng_for(i)), tagged)] += 1
    # each row is picked with probability 0.05 per trial; the first and second half of the file alike
    half = len(tagged) // 2
    assert abs(hits[:half].mean() - hits[half:].mean()) < 0.05
    assert abs(hits.mean() - 20 * math.floor(0.05 * len(tagged)) / len(tagged)) < 1e-9


def test_intensity_options(tagged):
    p = SEVERITIES[2]
    still = crosstalk(tagged, CrosstalkParams(p.fraction, perturb_intensity=False), rng_for(1))
    assert np.array_equal(still.intensity, tagged.intensity)
    assert len(_changed_rows(still, tagged)) == math.floor(p.fraction * len(tagged))
    clipped = crosstalk(tagged, CrosstalkParams(p.fraction, clip_intensity=True), rng_for(1))
    assert clipped.intensity.min() >= 0.0 and clipped.intensity.max() <= tagged.intensity_max
    raw = crosstalk(tagged, p, rng_for(1))
    assert raw.intensity.min() < 0.0  # paper mode leaves out-of-range intensities


def test_effect_grows_with_severity(tagged):
    changed = [len(_changed_rows(crosstalk(tagged, p, rng_for(0)), tagged)) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(changed))


