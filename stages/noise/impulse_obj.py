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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.registry import stage


@dataclass(frozen=True)
class ImpulseObjParams:
    count_divisor: float  # floor(N / count_divisor) points of each object are hit; inf hits none
    magnitude: float = 0.1  # metres added or subtracted on every axis



@stage("impulse_obj", params=ImpulseObjParams)
def impulse_obj(frame: Frame, params: ImpulseObjParams, rng: np.random.Generator) -> Frame:
    d, mag = params.count_divisor, params.magnitude
    if not d > 0:
        raise ValueError(f"impulse_obj: count_divisor must be > 0, got {d}")
    if not mag >= 0:
        raise ValueError(f"impulse_obj: magnitude must be ≥ 0, got {mag}")
    if math.isinf(d) or mag == 0:
        return frame
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
