"""`origin = "lidar"`: a stage measures from the LiDAR's position, and what it leaves alone keeps its bytes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.origin import ROW, in_lidar_frame
from bench_build.stages.sensor import HDL64E

ORIGIN = (1.43, 0.0, 2.184)  # a Waymo TOP laser in the vehicle frame (m)


def _frame(scene: Frame, origin=ORIGIN) -> Frame:
    """``scene`` (LiDAR frame) as a vehicle-frame source gives it: every point and box moved by ``origin`` (the
    points by a millimetre more or less, so that their float32 values are not ``scene``'s plus ``origin``)."""
    pts = scene.points.copy()
    wobble = np.random.default_rng(7).uniform(-1e-3, 1e-3, (len(pts), 3))
    pts[:, :3] = (scene.points[:, :3].astype(np.float64) + origin + wobble).astype(np.float32)
    boxes = replace(scene.boxes, center=scene.boxes.center + origin)
    return replace(scene, points=pts, boxes=boxes, sensor=replace(HDL64E, origin=origin))


def _far_to_fog(f: Frame) -> Frame:
    """A toy range stage: points beyond 20 m from (0, 0, 0) move to half their range along their ray (tagged
    fog), one fog point is added 5 m ahead; nearer points and boxes are left alone."""
    r = np.linalg.norm(f.xyz.astype(np.float64), axis=1)
    far = r > 20.0
    pts = f.points.copy()
    pts[far, :3] = (f.xyz[far].astype(np.float64) / 2).astype(np.float32)
    tags = f.point_tag.copy()
    tags[far] = PointTag.SCATTER_FOG
    out = f.with_points(pts, point_tag=tags)
    return out.append(np.array([[5.0, 0.0, 0.0, 0.5]], np.float32), PointTag.SCATTER_FOG)


def test_a_stage_run_from_the_lidar_sees_the_scan_as_the_lidar_did(scene):
    """The same stage on the vehicle-frame scan, run from the LiDAR, gives the LiDAR-frame result moved by the
    origin: the same points move, the fog point is 5 m ahead of the laser, not of the vehicle origin. Points it
    did not move keep their input bytes exactly, although the shift there and back does not round-trip in
    float32; the boxes come back as they were."""
    f = _frame(scene)
    lidar = f.points.copy()
    lidar[:, :3] = (f.xyz.astype(np.float64) - ORIGIN).astype(np.float32)
    ref = _far_to_fog(replace(f, points=lidar))
    out = in_lidar_frame(f, _far_to_fog)
    assert ROW not in out.labels and set(out.labels) == set(ref.labels)
    assert np.array_equal(out.point_tag, ref.point_tag)
    np.testing.assert_allclose(out.xyz, ref.xyz.astype(np.float64) + ORIGIN, atol=1e-5)
    np.testing.assert_allclose(out.points[-1, :3], np.add([5.0, 0, 0], ORIGIN), atol=1e-6)
    near = np.flatnonzero(ref.point_tag[:len(f)] == 0)
    assert np.array_equal(out.points[near], f.points[near])  # the very bytes of the input
    back = (((f.xyz[near].astype(np.float64) - ORIGIN).astype(np.float32)).astype(np.float64) + ORIGIN)
    assert (back.astype(np.float32) != f.xyz[near]).any()  # which a plain shift back would not give
    assert out.boxes is f.boxes and out.sensor is f.sensor
    seen = []
    in_lidar_frame(f, lambda g: seen.append(g.sensor.origin) or g)  # inside, the LiDAR is at the origin
    assert seen == [(0.0, 0.0, 0.0)]
    # from the vehicle origin the same stage moves other points: the 20 m sphere is elsewhere
    assert not np.array_equal(_far_to_fog(f).point_tag, out.point_tag)


def test_a_frame_already_in_the_lidar_frame_is_passed_through_and_one_without_a_sensor_is_refused(scene):
    f = replace(scene, sensor=HDL64E)
    out = in_lidar_frame(f, _far_to_fog)
    assert np.array_equal(out.points, _far_to_fog(f).points) and ROW not in out.labels
    with pytest.raises(ValueError, match="origin = 'lidar' needs the LiDAR's position"):
        in_lidar_frame(replace(scene, sensor=None), _far_to_fog)


def test_a_stage_that_drops_the_label_columns_is_refused(scene):
    f = _frame(scene)
    with pytest.raises(ValueError, match="dropped the per-point label columns"):
        in_lidar_frame(f, lambda g: replace(g, labels={}))


def test_a_stage_that_moves_the_boxes_gets_them_back_in_the_points_frame(scene):
    f = _frame(scene)

    def lift(g: Frame) -> Frame:
        return g.with_boxes(replace(g.boxes, center=g.boxes.center + np.array([0.0, 0.0, 1.0])))

    out = in_lidar_frame(f, lift)
    np.testing.assert_allclose(out.boxes.center, f.boxes.center + np.array([0.0, 0.0, 1.0]))


@pytest.mark.parametrize("shape", ["same rows", "rows dropped and reordered"])
def test_unmoved_points_keep_their_bytes_whatever_the_stage_does_to_the_rows(scene, shape):
    """A stage that keeps every row in place (fog) and one that drops and reorders rows (snow's noise floor, a
    ground-last writer): either way a point it did not move comes back with its input bytes, a moved one shifted
    back, and every label follows its row."""
    f = _frame(scene)
    order = np.arange(len(f)) if shape == "same rows" else np.random.default_rng(1).permutation(len(f))[::2]

    def stage(g: Frame) -> Frame:
        g = g.take(order)
        r = np.linalg.norm(g.xyz.astype(np.float64), axis=1)
        pts = g.points.copy()
        pts[r > 20.0, 2] += np.float32(0.5)
        return g.with_points(pts)

    out = in_lidar_frame(f, stage)
    moved = np.linalg.norm(f.xyz[order].astype(np.float64) - ORIGIN, axis=1) > 20.0
    assert 0 < moved.sum() < len(order)
    assert np.array_equal(out.points[~moved], f.points[order][~moved])
    np.testing.assert_allclose(out.xyz[moved], f.xyz[order][moved] + np.array([0.0, 0.0, 0.5]), atol=1e-5)
    for name, col in f.labels.items():
        assert np.array_equal(out.labels[name], col[order]), name
