"""incomplete_echo: int(r·n) points deleted from every vehicle box with more than 10 points (Robo3D, KITTI)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.density.incomplete_echo import IncompleteEchoParams, incomplete_echo
from bench_build.stages.frame import Frame
from tests.stages.conftest import make_scene, rng_for

SEVERITIES = load_recipe("robo3d-kitti-c").corruption("incomplete_echo").params


def _scene(cls, n_last: int):
    """make_scene with box classes ``cls`` (3 objects + DontCare) and box 2 reduced to ``n_last`` points; rows ids."""
    f = make_scene(4, with_ring=True)
    f = f.with_boxes(f.boxes.replace(cls=np.array([*cls, "DontCare"], dtype=object)))
    keep = np.ones(len(f), dtype=bool)
    keep[f.box_points[2][n_last:]] = False
    f = f.take(keep)
    f = replace(f, labels={**f.labels, "row": np.arange(len(f), dtype=np.int64)})
    assert len(f.box_points[2]) == n_last
    return f


@pytest.fixture(scope="module")
def mixed():
    """Car (≈1500 points), Pedestrian (≈1500, not a vehicle), Van with exactly 10 points (not > 10)."""
    return _scene(("Car", "Pedestrian", "Van"), 10)


@pytest.fixture(scope="module")
def small_van():
    """Truck, Tram, and a Van with 11 points (just over the threshold)."""
    return _scene(("Truck", "Tram", "Van"), 11)


def _removed(frame, out):
    removed = np.ones(len(frame), dtype=bool)
    removed[out.labels["row"]] = False
    return removed


def test_recipe_values():
    assert [p.ratio for p in SEVERITIES] == [0.75, 0.85, 0.95]
    assert all((p.classes, p.min_points) == (("Car", "Van", "Truck", "Tram"), 10) for p in SEVERITIES)


def test_zero_ratio_and_no_boxes_are_identity(mixed):
    assert incomplete_echo(mixed, IncompleteEchoParams(0.0), rng_for(0)) is mixed
    no_boxes = replace(mixed, boxes=None)
    assert incomplete_echo(no_boxes, SEVERITIES[2], rng_for(0)) is no_boxes


@pytest.mark.parametrize("kw", [{"ratio": -0.1}, {"ratio": 1.01}, {"ratio": float("nan")},
                                {"ratio": 0.5, "min_points": -1}, {"ratio": 0.5, "classes": (1.0,)}])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError, match="incomplete_echo"):
        IncompleteEchoParams(**kw)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_exact_count_per_vehicle_and_nothing_else(mixed, severity):
    p = SEVERITIES[severity - 1]
    out = incomplete_echo(mixed, p, rng_for(severity))
    removed = _removed(mixed, out)
    car = mixed.box_points[0]
    assert len(car) > 1000
    assert removed[car].sum() == int(p.ratio * len(car))
    assert removed.sum() == int(p.ratio * len(car))  # pedestrian, 10-point van and background untouched
    kept = out.labels["row"]
    assert np.all(np.diff(kept) > 0) and np.array_equal(out.points, mixed.points[kept])
    assert out.points.dtype == np.float32
    assert out.boxes is mixed.boxes


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_every_vehicle_class_and_threshold(small_van, severity):
    p = SEVERITIES[severity - 1]
    removed = _removed(small_van, incomplete_echo(small_van, p, rng_for(severity)))
    expect = [int(p.ratio * len(small_van.box_points[j])) for j in range(3)]
    assert [int(removed[small_van.box_points[j]].sum()) for j in range(3)] == expect
    assert expect[2] == int(p.ratio * 11) > 0
    assert removed.sum() == sum(expect)


def test_classes_are_configurable(mixed):
    p = IncompleteEchoParams(0.85, classes=("Pedestrian",))
    removed = _removed(mixed, incomplete_echo(mixed, p, rng_for(1)))
    ped = mixed.box_points[1]
    assert removed[ped].sum() == int(0.85 * len(ped)) and removed.sum() == removed[ped].sum()


def test_deleted_points_are_uniform(mixed):
    """Each car point is deleted with probability int(r·n)/n; no part of the car is favoured."""
    p = SEVERITIES[0]
    car = mixed.box_points[0]
    hits = np.zeros(len(car))
    for i in range(40):
        hits += _removed(mixed, incomplete_echo(mixed, p, rng_for(50 + i)))[car]
    q = int(p.ratio * len(car)) / len(car)
    half = len(car) // 2
    assert abs(hits[:half].mean() / 40 - q) < 0.02 and abs(hits[half:].mean() / 40 - q) < 0.02


def test_effect_grows_with_severity(mixed):
    removed = [len(mixed) - len(incomplete_echo(mixed, p, rng_for(0))) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(removed))


# ---- label mode (SemanticKITTI-C / nuScenes-C / WOD-C: vehicle classes from point labels) ----------------

def _labelled(counts: dict[int, int], n_other: int = 500):
    """A frame whose ``semantic`` column holds raw id k for counts[k] points (shuffled), plus road (40)."""
    rng = np.random.default_rng(3)
    sem = np.concatenate([np.full(n, k) for k, n in counts.items()] + [np.full(n_other, 40)]).astype(np.uint32)
    rng.shuffle(sem)
    pts = rng.normal(size=(len(sem), 4)).astype(np.float32)
    return Frame("lab", pts, labels={"semantic": sem, "row": np.arange(len(sem))})


SK = load_recipe("robo3d-semantickitti-c").corruption("incomplete_echo").params


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_label_mode_drops_the_stated_fraction_of_each_vehicle_class(severity):
    # car = raw 10 + 252 (one class), truck = 18 + 258, bicycle 11 with exactly 10 points (not > 10),
    # motorcycle 15 with 11 points, other-vehicle = 13 + 20; 30 (person) is not a vehicle
    counts = {10: 400, 252: 123, 18: 57, 258: 40, 11: 10, 15: 11, 13: 7, 20: 5, 30: 300}
    f = _labelled(counts)
    p = SK[severity - 1]
    out = incomplete_echo(f, p, rng_for(severity))
    removed = _removed(f, out)
    sem = f.labels["semantic"]
    groups = {"car": [10, 252], "truck": [18, 258], "bicycle": [11], "motorcycle": [15], "other": [13, 20]}
    for ids in groups.values():
        n = int(np.isin(sem, ids).sum())
        want = int(p.ratio * n) if n > 10 else 0
        assert removed[np.isin(sem, ids)].sum() == want, ids
    assert not removed[np.isin(sem, [30, 40])].any()
    # survivors keep their labels (the column follows the points)
    np.testing.assert_array_equal(out.labels["semantic"], sem[out.labels["row"]])


def test_label_mode_needs_labels_and_ignores_boxes(mixed):
    with pytest.raises(ValueError, match="no semantic labels"):
        incomplete_echo(mixed, SK[0], rng_for(0))
    f = replace(mixed, labels={**mixed.labels, "semantic": np.full(len(mixed), 40, np.uint32)})
    assert incomplete_echo(f, SK[2], rng_for(0)) is f  # no vehicle labels: boxes are not used


def test_label_mode_params_are_checked():
    with pytest.raises(ValueError, match="label_classes"):
        IncompleteEchoParams(0.5, label_ids=(1, 2), label_classes=(1,))
