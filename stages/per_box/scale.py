"""Object scaling (KITTI-C `scale`, Li et al. Appendix C-B).

Every annotated object (every box except DontCare) is scaled along one axis of its box frame chosen
uniformly among length (x along the heading), width (y) and height (z) by the factor 1 ± s (random
sign), with s = 0.04, 0.08, 0.12, 0.16, 0.20 at severities 1–5; the other two axes are unchanged.
Scaling is about the box centre, except that a height scaling keeps the box bottom where it was
(the paper "moves the object to the ground"): points and box are shifted by (f − 1)·height/2 in z.
The box's dimension along the chosen axis is multiplied by the same factor and, for height, its
centre moves by the same shift, as the paper's "labels are modified accordingly" requires.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); they
  are scaled with the box, so they stay inside the new box (up to float32 rounding). Other points
  are never moved: the region a shrunk object leaves stays empty, and surrounding points a grown
  box now covers stay where they are.
* Axis, sign and factor are drawn for every valid box, also one without points, whose box is scaled
  alike. "Ground" is the box bottom, not a fitted ground plane.
* KITTI alpha and the 2D box are recomputed (`refresh_camera_fields`). Intensity and extra columns
  are kept. change = 0 is identity; change must be < 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import refresh_camera_fields
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ScaleParams:
    change: float  # the chosen axis is scaled by 1 + change or 1 - change


@stage("scale", params=ScaleParams)
def scale(frame: Frame, params: ScaleParams, rng: np.random.Generator) -> Frame:
    s = params.change
    if not 0 <= s < 1:
        raise ValueError(f"scale: change must be in [0, 1), got {s}")
    boxes = frame.boxes
    if boxes is None or not boxes.valid.any() or s == 0:
        return frame
    m = len(boxes)
    axis = rng.integers(0, 3, size=m)
    factor = 1.0 + s * rng.choice(np.array([-1.0, 1.0]), size=m)
    valid = boxes.valid
    factors = np.ones((m, 3))
    factors[np.flatnonzero(valid), axis[valid]] = factor[valid]
    shift_z = (factors[:, 2] - 1.0) * boxes.dims[:, 2] / 2  # keeps the box bottom in place

    owner = frame.box_index
    inside = np.flatnonzero(owner >= 0)
    points = frame.points.copy()
    if inside.size:
        j = owner[inside]
        rel = frame.xyz[inside].astype(np.float64) - boxes.center[j]
        c, sn = np.cos(boxes.heading[j]), np.sin(boxes.heading[j])
        lx = (rel[:, 0] * c + rel[:, 1] * sn) * factors[j, 0]
        ly = (-rel[:, 0] * sn + rel[:, 1] * c) * factors[j, 1]
        lz = rel[:, 2] * factors[j, 2] + shift_z[j]
        moved = np.stack([lx * c - ly * sn, lx * sn + ly * c, lz], axis=1) + boxes.center[j]
        points[inside, :3] = moved.astype(np.float32)

    center = boxes.center.copy()
    center[:, 2] += shift_z
    new_boxes = boxes.replace(center=center, dims=boxes.dims * factors)
    new_boxes = refresh_camera_fields(new_boxes, frame.calib, valid)
    return frame.with_points(points).with_boxes(new_boxes)
