"""Impulse noise on object points (KITTI-C `impulse_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare) with N points, ⌊N / d⌋ of its points, chosen
uniformly without replacement, get a deterministic bias of ±m on each of x, y and z (independent
random signs), with d = 30, 25, 20, 15, 10 at severities 1–5 and m = 0.1 m.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); a point
  in two overlapping boxes belongs to the first one. Everything else is untouched.
* "N" is counted per object, so an object with fewer than d points gets no impulse; for d < 1 the
  count is capped at N (every point is hit once).
* The boxes are kept (measurement noise, not a change of the object): a hit point may end up up to
  m outside its box on each axis.
* Intensity and extra columns are kept; points are not re-tagged. d = inf or m = 0 is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: it works in the box-normalised frame (`bench_build.stages.kernels.box_unit`), so
the constant is in units of max(l, w, h)/2 (a car of length 3.9 m: × 1.95 m), and afterwards, if any
coordinate of the object's points exceeds the ±1 cube, all of the object's points are shrunk by one
common factor towards the box centre (the released `normalize`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule
from bench_build.stages.kernels.box_unit import clamp_unit, from_unit, to_unit
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ImpulseObjParams:
    count_divisor: float  # floor(N / count_divisor) points of each object are hit; inf hits none
    magnitude: float = 0.1  # added or subtracted on every axis: metres (text), box units (code)
    rule: str = "code"  # "code": Li et al.'s released generator (box-normalised frame + clamp); "text": metres



@stage("impulse_obj", params=ImpulseObjParams, version=2)  # v2: rule (code: box-normalised frame)
def impulse_obj(frame: Frame, params: ImpulseObjParams, rng: np.random.Generator) -> Frame:
    d, mag = params.count_divisor, params.magnitude
    if not d > 0:
        raise ValueError(f"impulse_obj: count_divisor must be > 0, got {d}")
    if not mag >= 0:
        raise ValueError(f"impulse_obj: magnitude must be ≥ 0, got {mag}")
    check_rule(params.rule, "impulse_obj")
    if math.isinf(d) or mag == 0:
        return frame
    if params.rule == "code":
        return _impulse_code(frame, d, mag, rng)
    chosen = []
    for idx in frame.box_points:
        n = min(len(idx), int(len(idx) // d))
        if n > 0:
            chosen.append(rng.choice(idx, size=n, replace=False))
    if not chosen:
        return frame
    hit = np.concatenate(chosen)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(hit.size, 3))
    points = frame.points.copy()
    points[hit, :3] = (frame.xyz[hit].astype(np.float64) + mag * signs).astype(np.float32)
    return frame.with_points(points)


def _impulse_code(frame: Frame, d: float, mag: float, rng: np.random.Generator) -> Frame:
    boxes = frame.boxes
    points = frame.points.copy()
    for j, idx in enumerate(frame.box_points):
        n = len(idx)
        n_hit = min(n, int(n // d))
        if n == 0:
            continue
        local = to_unit(frame.xyz[idx], boxes.center[j], boxes.dims[j], boxes.heading[j])
        if n_hit > 0:
            hit = rng.choice(n, size=n_hit, replace=False)
            local[hit] += rng.choice(np.array([-1.0, 1.0]), size=(n_hit, 3)) * mag
        # the released clamp runs on every object, hit or not (a no-op unless it left the ±1 cube)
        local = clamp_unit(local)
        points[idx, :3] = from_unit(local, boxes.center[j], boxes.dims[j], boxes.heading[j]).astype(np.float32)
    return frame.with_points(points)
