"""Object shear (KITTI-C `shear`, Li et al. Appendix C-B).

Every annotated object (every box except DontCare) is slanted in its own box frame (origin at the
box centre, x along the heading, z up): p' = A p with A = [[1, a, b], [c, 1, d], [0, 0, 1]], where
each of a, b, c, d is ±U(lo, hi) with its own random sign, and (lo, hi) = (0, 0.10), (0.05, 0.15),
(0.10, 0.20), (0.15, 0.25), (0.20, 0.30) at severities 1–5. Points are then mapped back to the
LiDAR frame. Heights (z) are unchanged, as the bottom row of A says.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0).
* The label describes the corrupted object: the box keeps its centre and heading and grows to the
  tightest box (in its own heading frame) around the sheared box, i.e. the image under A of the
  original box: length' = length + |a|·width + |b|·height, width' = |c|·length + width +
  |d|·height, height unchanged. Since A is linear, every sheared object point stays inside the new
  box (up to float32 rounding of the stored coordinates). The paper's labels would keep the old box,
  which no longer encloses the sheared object; a detector that finds the sheared object should not
  be scored against it. KITTI alpha and the 2D box are recomputed (`refresh_camera_fields`).
* Points of the surroundings (ground, a neighbouring object) that the grown box now covers are not
  moved; a later `box_index` counts them as object points, as it would for any tight label.
* Coefficients are drawn for every valid box, also one without points, whose box is grown alike.
* Intensity and extra columns are kept. max_coeff = 0 is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: the same shear (its matrix, applied in the box-normalised frame,
is the same linear map in the box frame), then every axis on which the object now leaves its box is
squeezed back into it (the released `normalize_gt`: coordinate i divided by max|p_i| / (dim_i / 2));
the box and its label are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule, refresh_camera_fields
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ShearParams:
    min_coeff: float  # lower bound of |a|, |b|, |c|, |d|
    max_coeff: float  # upper bound of |a|, |b|, |c|, |d|
    rule: str = "code"  # "code": squeezed back into the unchanged box (released code); "text": box grows


def _to_box_frame(xyz: np.ndarray, center: np.ndarray, heading: np.ndarray) -> np.ndarray:
    d = xyz - center
    c, s = np.cos(heading), np.sin(heading)
    return np.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c, d[:, 2]], axis=1)


def _from_box_frame(local: np.ndarray, center: np.ndarray, heading: np.ndarray) -> np.ndarray:
    c, s = np.cos(heading), np.sin(heading)
    return np.stack(
        [local[:, 0] * c - local[:, 1] * s, local[:, 0] * s + local[:, 1] * c, local[:, 2]], axis=1
    ) + center


@stage("shear", params=ShearParams, version=2)  # v2: rule (code: squeezed into the kept box)
def shear(frame: Frame, params: ShearParams, rng: np.random.Generator) -> Frame:
    lo, hi = params.min_coeff, params.max_coeff
    if not 0 <= lo <= hi:
        raise ValueError(f"shear: need 0 ≤ min_coeff ≤ max_coeff, got {params}")
    check_rule(params.rule, "shear")
    boxes = frame.boxes
    if boxes is None or not boxes.valid.any() or hi == 0:
        return frame
    m = len(boxes)
    coeff = rng.uniform(lo, hi, size=(m, 4)) * rng.choice(np.array([-1.0, 1.0]), size=(m, 4))
    coeff[~boxes.valid] = 0.0
    a, b, c, d = coeff.T

    owner = frame.box_index
    inside = np.flatnonzero(owner >= 0)
    points = frame.points.copy()
    if inside.size:
        j = owner[inside]
        local = _to_box_frame(frame.xyz[inside].astype(np.float64), boxes.center[j], boxes.heading[j])
        sheared = np.stack(
            [
                local[:, 0] + a[j] * local[:, 1] + b[j] * local[:, 2],
                c[j] * local[:, 0] + local[:, 1] + d[j] * local[:, 2],
                local[:, 2],
            ],
            axis=1,
        )
        if params.rule == "code":
            sheared = squeeze_into_boxes(sheared, j, boxes.dims)
        points[inside, :3] = _from_box_frame(sheared, boxes.center[j], boxes.heading[j]).astype(np.float32)
    if params.rule == "code":
        return frame.with_points(points)

    dims = boxes.dims.copy()
    length, width, height = boxes.dims.T
    valid = boxes.valid
    dims[valid, 0] = (length + np.abs(a) * width + np.abs(b) * height)[valid]
    dims[valid, 1] = (np.abs(c) * length + width + np.abs(d) * height)[valid]
    new_boxes = refresh_camera_fields(boxes.replace(dims=dims), frame.calib, valid)
    return frame.with_points(points).with_boxes(new_boxes)


def squeeze_into_boxes(local: np.ndarray, owner: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """The released `normalize_gt` for every object at once: box-frame coordinates (metres) of points
    owned by ``owner``; per object and axis, divided by max|p_i| / (dim_i / 2) where that exceeds 1."""
    m = len(dims)
    top = np.zeros((m, 3))
    np.maximum.at(top, owner, np.abs(local))
    half = dims / 2.0
    ratio = np.divide(top, half, out=np.zeros_like(top), where=half > 0)
    return local / np.where(ratio > 1, ratio, 1.0)[owner]
