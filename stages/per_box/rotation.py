"""Object rotation (KITTI-C `rotation`, Li et al. Appendix C-B).

Every annotated object (every box except DontCare) is rotated about the vertical axis through its box
centre by ±U(lo, hi) degrees (random sign: clockwise or anticlockwise), with (lo, hi) = (0, 2),
(3, 4), (5, 6), (7, 8), (9, 10) degrees at severities 1–5 (Appendix C; the released generator behind
the published numbers, and so the default recipe, uses U(c − 1, c + 1), c = 1, 3, 5, 7, 9: (0, 2),
(2, 4), (4, 6), (6, 8), (8, 10) — the same rule with other bounds). The box rotates with it: its heading
becomes wrap(heading + θ) in [−π, π); centre and dimensions are unchanged, as the paper's "labels
are modified accordingly" requires.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); they
  keep their box-frame coordinates, so they stay inside the rotated box (up to float32 rounding).
  Points of the surroundings that the rotated box now covers (ground) are kept, and the region the
  object leaves is not filled.
* Angles are drawn for every valid box, also one without points, whose box rotates alike.
* KITTI alpha and the 2D box are recomputed (`refresh_camera_fields`). Intensity and extra columns
  are kept. max_degrees = 0 is identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import refresh_camera_fields
from bench_build.stages.kernels.spherical import wrap_angle
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class RotationParams:
    min_degrees: float  # lower bound of |θ|
    max_degrees: float  # upper bound of |θ|


@stage("rotation", params=RotationParams)
def rotation(frame: Frame, params: RotationParams, rng: np.random.Generator) -> Frame:
    lo, hi = params.min_degrees, params.max_degrees
    if not 0 <= lo <= hi <= 180:
        raise ValueError(f"rotation: need 0 ≤ min_degrees ≤ max_degrees ≤ 180, got {params}")
    boxes = frame.boxes
    if boxes is None or not boxes.valid.any() or hi == 0:
        return frame
    m = len(boxes)
    theta = np.radians(rng.uniform(lo, hi, size=m)) * rng.choice(np.array([-1.0, 1.0]), size=m)
    theta[~boxes.valid] = 0.0

    owner = frame.box_index
    inside = np.flatnonzero(owner >= 0)
    points = frame.points.copy()
    if inside.size:
        j = owner[inside]
        rel = frame.xyz[inside].astype(np.float64) - boxes.center[j]
        c, s = np.cos(theta[j]), np.sin(theta[j])
        moved = np.stack([rel[:, 0] * c - rel[:, 1] * s, rel[:, 0] * s + rel[:, 1] * c, rel[:, 2]], axis=1)
        points[inside, :3] = (moved + boxes.center[j]).astype(np.float32)

    heading = boxes.heading.copy()
    heading[boxes.valid] = wrap_angle(boxes.heading[boxes.valid] + theta[boxes.valid])
    new_boxes = refresh_camera_fields(boxes.replace(heading=heading), frame.calib, boxes.valid)
    return frame.with_points(points).with_boxes(new_boxes)
