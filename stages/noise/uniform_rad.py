"""Uniform noise on the range of every point (KITTI-C `uniform_rad`, Li et al. Appendix C-A).

Models bounded ranging error of the sensor: each point moves along its own ray by r' = r + U(−a, a),
a = 0.04, 0.08, 0.12, 0.16, 0.20 m at severities 1–5; azimuth and elevation are unchanged.
Decisions the paper leaves open: intensity and any extra columns (e.g. ring) are kept; the new range
is not clamped at 0 (like `gaussian_rad`, a point closer than a to the sensor may be flipped through
it, which never happens on KITTI where returns start ≈ 2 m out); an empty scan or a = 0 returns the
input frame unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.geometry import scale_range
from stages.registry import stage


@dataclass(frozen=True)
class UniformRadParams:
    half_width: float  # a, metres: the range noise is U(−a, a); 0 is the identity


@stage("uniform_rad", params=UniformRadParams)
def uniform_rad(frame: Frame, params: UniformRadParams, rng: np.random.Generator) -> Frame:
    a = params.half_width
    if not (a >= 0 and math.isfinite(a)):
        raise ValueError(f"uniform_rad: half_width must be a finite value ≥ 0, got {a}")
    if a == 0 or len(frame) == 0:
        return frame
    r = np.linalg.norm(frame.xyz.astype(np.float64), axis=1)
    points = frame.points.copy()
    points[:, :3] = scale_range(frame.xyz, r + rng.uniform(-a, a, size=len(frame)))
    return frame.with_points(points)
