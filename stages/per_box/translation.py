"""Object translation (KITTI-C `translation`, Li et al. Appendix C-B).

Every annotated object (all boxes except DontCare) is moved horizontally by a distance
d ~ U(lo, hi) in a direction drawn uniformly in [0, 2π), with (lo, hi) = (0, 0.2), (0.3, 0.4),
(0.5, 0.6), (0.7, 0.8), (0.9, 1.0) m at severities 1–5. The paper prints the last range as
"(0.9, 0.1)"; we read it as (0.9, 1.0), which matches its "< 1 m" in §IV. The paper says objects move
"forward or backward on the X and Y axis"; a uniformly random horizontal direction keeps the moved
distance exactly in [lo, hi], which a per-axis draw would not.

Object points are the points inside the exact oriented box (`assign_points_to_boxes`, margin 0). They
move with the box; the region they leave is left empty (no infill) and points already at the
destination (ground) are kept, as in the paper's implementation. The box centre moves by the same
vector, and its KITTI alpha and 2D box are recomputed (`refresh_camera_fields`) so an exported
``label_2`` file describes the corrupted scene.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows the released generator behind the
published numbers: Δx and Δy are drawn independently, each ±U(lo, hi) with its own random sign, in
the LiDAR frame (its table: (c − 0.1, c + 0.1), c = 0.1, 0.3, 0.5, 0.7, 0.9 m), so the distance moved
is ≈ √2·c. The box moves by exactly the same vector (the released code updated the label in the camera
frame, off by a few mm; we keep the box exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule, refresh_camera_fields
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class TranslationParams:
    min_distance: float  # metres
    max_distance: float  # metres
    rule: str = "code"  # "code": per-axis ±U(lo, hi) (released code); "text": distance U(lo, hi), random direction


@stage("translation", params=TranslationParams, version=2)  # v2: rule (code: per-axis shifts)
def translation(frame: Frame, params: TranslationParams, rng: np.random.Generator) -> Frame:
    if not 0 <= params.min_distance <= params.max_distance:
        raise ValueError(f"translation: need 0 ≤ min_distance ≤ max_distance, got {params}")
    boxes = frame.boxes
    if boxes is None or not boxes.valid.any() or params.max_distance == 0:
        return frame
    check_rule(params.rule, "translation")
    m = len(boxes)
    shift = np.zeros((m, 3))
    if params.rule == "code":
        mag = rng.uniform(params.min_distance, params.max_distance, size=(m, 2))
        shift[:, :2] = mag * rng.choice(np.array([-1.0, 1.0]), size=(m, 2))
    else:
        dist = rng.uniform(params.min_distance, params.max_distance, size=m)
        theta = rng.uniform(0.0, 2 * np.pi, size=m)
        shift[:, 0], shift[:, 1] = dist * np.cos(theta), dist * np.sin(theta)
    shift[~boxes.valid] = 0.0

    owner = frame.box_index
    inside = owner >= 0
    points = frame.points.copy()
    points[inside, :3] = (frame.xyz[inside].astype(np.float64) + shift[owner[inside]]).astype(np.float32)
    moved = boxes.replace(center=boxes.center + shift)
    moved = refresh_camera_fields(moved, frame.calib, boxes.valid)
    return frame.with_points(points).with_boxes(moved)
