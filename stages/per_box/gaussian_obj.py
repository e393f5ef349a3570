"""Gaussian noise on object points (KITTI-C `gaussian_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare) each of its points moves by an independent
N(0, σ²) draw on each Cartesian axis, with σ = 0.02, 0.03, 0.04, 0.05, 0.06 m at severities 1–5.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); a point
  in two overlapping boxes belongs to the first one and is moved once. Everything else is untouched.
* The boxes are kept: the noise is measurement noise on the object's surface, not a change of the
  object, so a jittered point may end up outside its box (the noise is unbounded; not clipped).
* Intensity and extra columns (e.g. ring) are kept; points are not re-tagged. σ = 0 is identity.

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
from bench_build.stages.per_box.uniform_obj import jitter_in_box_units
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class GaussianObjParams:
    sigma: float  # standard deviation of the per-axis noise: metres (text), box units (code)
    rule: str = "code"  # "code": Li et al.'s released generator (box-normalised frame + clamp); "text": metres


@stage("gaussian_obj", params=GaussianObjParams, version=2)  # v2: rule (code: box-normalised frame)
def gaussian_obj(frame: Frame, params: GaussianObjParams, rng: np.random.Generator) -> Frame:
    sigma = params.sigma
    if not sigma >= 0:
        raise ValueError(f"gaussian_obj: sigma must be ≥ 0, got {sigma}")
    check_rule(params.rule, "gaussian_obj")
    if params.rule == "code":
        return jitter_in_box_units(frame, lambda n: rng.normal(size=(n, 3)) * sigma)
    inside = np.flatnonzero(frame.box_index >= 0)
    if sigma == 0 or inside.size == 0:
        return frame
    points = frame.points.copy()
    noise = rng.normal(0.0, sigma, size=(inside.size, 3))
    points[inside, :3] = (frame.xyz[inside].astype(np.float64) + noise).astype(np.float32)
    return frame.with_points(points)
