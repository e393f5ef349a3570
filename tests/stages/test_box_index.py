"""`assign_points_to_boxes` (numba, one pass) against the per-box numpy form it replaced, point for point."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.frame import Boxes
from bench_build.stages.geometry import assign_points_to_boxes
from bench_build.stages.kernels.boxes import points_in_box_frame


def per_box_reference(xyz, boxes, margin=0.0):
    """The former implementation: one numpy pass per valid box, first box wins."""
    xyz = np.asarray(xyz, dtype=np.float64)
    out = np.full(len(xyz), -1, dtype=np.int64)
    for j in range(len(boxes)):
        if not boxes.valid[j]:
            continue
        half = boxes.dims[j] / 2 + margin
        radius = float(np.linalg.norm(half))
        near = np.flatnonzero(np.abs(xyz - boxes.center[j]).max(axis=1) <= radius)
        if near.size == 0:
            continue
        local = points_in_box_frame(xyz[near], boxes.center[j], boxes.heading[j])
        inside = near[np.all(np.abs(local) <= half, axis=1)]
        out[inside[out[inside] < 0]] = j
    return out


def make_boxes(rng, m):
    cls = np.array(["Car", "Pedestrian", "Cyclist", "DontCare"], dtype=object)[rng.integers(0, 4, m)]
    return Boxes(center=rng.uniform(-6, 6, (m, 3)), dims=rng.uniform(0.5, 5, (m, 3)),
                 heading=rng.uniform(-4, 4, m), cls=cls, truncated=np.zeros(m), occluded=np.zeros(m, int),
                 alpha=np.zeros(m), bbox2d=np.zeros((m, 4)))


def boundary_points(rng, boxes, per_box=400):
    """Points exactly on, just inside and just outside each box's faces (in float32, as scans are stored)."""
    pts = []
    for j in range(len(boxes)):
        local = rng.uniform(-1, 1, (per_box, 3)) * boxes.dims[j] / 2
        axis = rng.integers(0, 3, per_box)
        local[np.arange(per_box), axis] = np.sign(local[np.arange(per_box), axis]) * boxes.dims[j][axis] / 2
        local *= 1 + rng.choice([-1e-7, 0.0, 1e-7], (per_box, 1))
        c, s = np.cos(boxes.heading[j]), np.sin(boxes.heading[j])
        world = np.stack([local[:, 0] * c - local[:, 1] * s, local[:, 0] * s + local[:, 1] * c, local[:, 2]], 1)
        pts.append(world + boxes.center[j])
    return np.concatenate(pts).astype(np.float32)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("margin", [0.0, 0.25])
def test_same_owner_as_the_per_box_form(seed, margin):
    rng = np.random.default_rng(seed)
    boxes = make_boxes(rng, 12)  # overlapping boxes: the first valid one must win
    xyz = np.concatenate([rng.uniform(-9, 9, (20_000, 3)).astype(np.float32), boundary_points(rng, boxes)])
    xyz[::997] = np.nan
    got = assign_points_to_boxes(xyz, boxes, margin)
    want = per_box_reference(xyz, boxes, margin)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    assert (got >= 0).sum() > 1000
    assert np.all(boxes.valid[got[got >= 0]])  # DontCare never owns a point
    assert np.all(got[::997] == -1)  # NaN points are inside nothing
    # float64 input gives the same owners as its float32 source
    assert np.array_equal(assign_points_to_boxes(xyz.astype(np.float64), boxes, margin), got)


def test_no_boxes_or_no_points():
    rng = np.random.default_rng(0)
    boxes = make_boxes(rng, 3)
    assert assign_points_to_boxes(np.zeros((0, 3), np.float32), boxes).shape == (0,)
    none = make_boxes(rng, 0)
    assert np.array_equal(assign_points_to_boxes(np.ones((5, 3)), none), np.full(5, -1))
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        assign_points_to_boxes(np.ones((5, 4)), boxes)


def test_scene_owners_unchanged(scene):
    got = assign_points_to_boxes(scene.xyz, scene.boxes)
    assert np.array_equal(got, per_box_reference(scene.xyz, scene.boxes))
    assert np.array_equal(scene.box_index, got) and set(np.unique(got)) == {-1, 0, 1, 2}
