"""Uniform noise on object points (KITTI-C `uniform_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare) each of its points moves by an independent
draw of U(−a, a) on each Cartesian axis, with a = 0.02, 0.04, 0.06, 0.08, 0.10 m at severities 1–5.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); a point
  in two overlapping boxes belongs to the first one and is moved once. Everything else is untouched.
* The boxes are kept: the noise is measurement noise on the object's surface, not a change of the
  object. A jittered point may therefore end up to ``a`` outside its box on each axis.
* Intensity and extra columns (e.g. ring) are kept; points are not re-tagged. ``a = 0`` is identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.registry import stage


@dataclass(frozen=True)
class UniformObjParams:
    half_width: float  # metres; each coordinate moves by U(-half_width, half_width)


@stage("uniform_obj", params=UniformObjParams)
def uniform_obj(frame: Frame, params: UniformObjParams, rng: np.random.Generator) -> Frame:
    a = params.half_width
    if not a >= 0:
        raise ValueError(f"uniform_obj: half_width must be ≥ 0, got {a}")
    inside = np.flatnonzero(frame.box_index >= 0)
    if a == 0 or inside.size == 0:
        return frame
    points = frame.points.copy()
    noise = rng.uniform(-a, a, size=(inside.size, 3))
    points[inside, :3] = (frame.xyz[inside].astype(np.float64) + noise).astype(np.float32)
    return frame.with_points(points)
