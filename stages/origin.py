"""Run a stage with the LiDAR at the origin (a recipe's ``origin = "lidar"``).

The weather stages compute ranges, elevations and incidence angles from (0, 0, 0), and fog and snow move
points along the ray from there: right where the points are in the LiDAR's own frame (KITTI, nuScenes), wrong
where they are in another (Waymo's vehicle frame puts the top LiDAR ≈ 1.4 m ahead of and ≈ 2 m above the
origin, so from there ground returns meet the ground at grazing angles and are all dried away or dropped).
`in_lidar_frame` shifts the points (and boxes) so that `Sensor.origin` is the origin, runs the stage, and shifts
its output back. Only a translation: the axes stay the points' own (for Waymo the vehicle's, z up), which is
the vertical the ground-incidence terms want.

Points the stage did not move come back with their original bytes (float32 cannot undo a shift exactly): each
row is followed through the stage by a temporary label, and a row whose shifted xyz the stage left untouched
takes its input xyz. Moved and new points are shifted back in float64 and rounded once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from bench_build.stages.frame import Boxes, Frame

ORIGINS = ("points", "lidar")  # what a recipe's corruption may say: compute from the points' origin / the LiDAR's

ROW = "_lidar_frame_row"  # the temporary label: input row + 1 (0 for a point the stage added)


def _shift_boxes(boxes: Boxes | None, by: np.ndarray) -> Boxes | None:
    return None if boxes is None else replace(boxes, center=np.asarray(boxes.center, np.float64) + by)


def _shifted(frame: Frame, origin: np.ndarray) -> Frame:
    """``frame`` with ``origin`` at (0, 0, 0) and every row numbered (label `ROW`): a new frame each time (≈ 1 ms
    for 100k points), so no copy outlives the stage."""
    pts = frame.points.copy()
    pts[:, :3] = (frame.points[:, :3].astype(np.float64) - origin).astype(np.float32)
    rows = np.arange(1, len(frame) + 1, dtype=np.int64)
    return replace(frame, points=pts, labels={**frame.labels, ROW: rows}, boxes=_shift_boxes(frame.boxes, -origin),
                   sensor=replace(frame.sensor, origin=(0.0, 0.0, 0.0)))  # the LiDAR is now at the origin


def in_lidar_frame(frame: Frame, apply: Callable[[Frame], Frame]) -> Frame:
    """``apply(frame)`` computed with the frame's LiDAR (`Sensor.origin`) at the origin, in the frame's own
    coordinates again. A frame whose LiDAR is at the origin is passed through; one without a sensor is refused."""
    if frame.sensor is None:
        raise ValueError(f"frame {frame.frame_id}: origin = 'lidar' needs the LiDAR's position, and the source "
                         "gives the frame no sensor")
    origin = np.asarray(frame.sensor.origin, dtype=np.float64)
    if not origin.any():
        return apply(frame)
    shifted = _shifted(frame, origin)
    out = apply(shifted)
    rows = out.labels.get(ROW)
    if rows is None:
        raise ValueError(f"frame {frame.frame_id}: the stage dropped the per-point label columns, so its unmoved "
                         "points cannot be given back their bytes")
    src = rows - 1
    in_order = len(src) == len(frame) and bool((src == np.arange(len(frame))).all())  # no row gone, added, moved
    take = slice(None) if in_order else np.maximum(src, 0)
    same = src >= 0
    for k in range(3):  # column by column: a (N, 3) gather and a reduce over its short axis cost 5× more
        same &= out.points[:, k] == shifted.points[take, k]
    back = out.points.copy()
    for k in range(3):
        moved = (out.points[:, k].astype(np.float64) + origin[k]).astype(np.float32)
        back[:, k] = np.where(same, frame.points[take, k], moved)
    labels = {k: v for k, v in out.labels.items() if k != ROW}
    boxes = frame.boxes if out.boxes is shifted.boxes else _shift_boxes(out.boxes, origin)
    return replace(out, points=back, labels=labels, boxes=boxes, sensor=frame.sensor)
