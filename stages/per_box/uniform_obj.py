"""Uniform noise on object points (KITTI-C `uniform_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare) each of its points moves by an independent
draw of U(−a, a) on each Cartesian axis, with a = 0.02, 0.04, 0.06, 0.08, 0.10 m at severities 1–5.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); a point
  in two overlapping boxes belongs to the first one and is moved once. Everything else is untouched.
* The boxes are kept: the noise is measurement noise on the object's surface, not a change of the
  object. A jittered point may therefore end up to ``a`` outside its box on each axis.
* Intensity and extra columns (e.g. ring) are kept; points are not re-tagged. ``a = 0`` is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: it works in the box-normalised frame (`bench_build.stages.kernels.box_unit`), so
the constant is in units of max(l, w, h)/2 (a car of length 3.9 m: × 1.95 m), and afterwards, if any
coordinate of the object's points exceeds the ±1 cube, all of the object's points are shrunk by one
common factor towards the box centre (the released `normalize`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule
from bench_build.stages.kernels.box_unit import clamp_unit, from_unit, to_unit
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class UniformObjParams:
    half_width: float  # each coordinate moves by U(-half_width, half_width): metres (text), box units (code)
    rule: str = "code"  # "code": Li et al.'s released generator (box-normalised frame + clamp); "text": metres


@stage("uniform_obj", params=UniformObjParams, version=2)  # v2: rule (code: box-normalised frame)
def uniform_obj(frame: Frame, params: UniformObjParams, rng: np.random.Generator) -> Frame:
    a = params.half_width
    if not a >= 0:
        raise ValueError(f"uniform_obj: half_width must be ≥ 0, got {a}")
    check_rule(params.rule, "uniform_obj")
    if params.rule == "code":
        return jitter_in_box_units(frame, lambda n: rng.uniform(-a, a, size=(n, 3)))
    inside = np.flatnonzero(frame.box_index >= 0)
    if a == 0 or inside.size == 0:
        return frame
    points = frame.points.copy()
    noise = rng.uniform(-a, a, size=(inside.size, 3))
    points[inside, :3] = (frame.xyz[inside].astype(np.float64) + noise).astype(np.float32)
    return frame.with_points(points)


def jitter_in_box_units(frame: Frame, draw) -> Frame:
    """Add ``draw(n)`` (n × 3, box units) to every object's n points in its box-normalised frame, then the
    released `normalize` clamp per object; objects in box order, one draw per object."""
    boxes = frame.boxes
    if boxes is None or not boxes.valid.any():
        return frame
    points = frame.points.copy()
    for j, idx in enumerate(frame.box_points):
        if len(idx) == 0:
            continue
        local = to_unit(frame.xyz[idx], boxes.center[j], boxes.dims[j], boxes.heading[j])
        local = clamp_unit(local + draw(len(idx)))
        points[idx, :3] = from_unit(local, boxes.center[j], boxes.dims[j], boxes.heading[j]).astype(np.float32)
    return frame.with_points(points)
