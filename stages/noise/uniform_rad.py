"""Uniform noise on the range of every point (KITTI-C `uniform_rad`, Li et al. Appendix C-A).

Models bounded ranging error of the sensor: each point moves along its own ray by r' = r + U(−a, a),
a = 0.04, 0.08, 0.12, 0.16, 0.20 m at severities 1–5 (``rule = "code"``, default: ×√3 as the released
generator did, ±0.069 … ±0.346 m; ``rule = "text"``: as Appendix C states); azimuth and elevation are unchanged.
Decisions the paper leaves open: intensity and any extra columns (e.g. ring) are kept; the new range
is not clamped at 0 (like `gaussian_rad`, a point closer than a to the sensor may be flipped through
it, which never happens on KITTI where returns start ≈ 2 m out); an empty scan or a = 0 returns the
input frame unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import range_factor
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class UniformRadParams:
    half_width: float  # a, metres: the range noise is U(−a, a) (before the rule's factor); 0 is the identity
    rule: str = "code"  # "code": U(−a, a)·√3 as Li et al.'s released generator; "text": U(−a, a), Appendix C


@stage("uniform_rad", params=UniformRadParams, version=3)  # v2: rule (code: ×√3); v3: float32 in place
def uniform_rad(frame: Frame, params: UniformRadParams, rng: np.random.Generator) -> Frame:
    a = params.half_width * range_factor(params.rule, "uniform_rad")
    if not (a >= 0 and math.isfinite(a)):
        raise ValueError(f"uniform_rad: half_width must be a finite value ≥ 0, got {a}")
    if a == 0 or len(frame) == 0:
        return frame
    # along the ray, xyz · (r + n) / r, in place on the float32 copy (relative error ~1e-7, micrometres)
    points = frame.points.copy()
    xyz = points[:, :3]
    r = np.sqrt(np.einsum("ij,ij->i", xyz, xyz))
    noise = rng.random(len(frame), dtype=np.float32)
    noise *= np.float32(2 * a)
    noise -= np.float32(a)
    np.divide(noise, r, out=noise, where=r > 0)
    noise += np.float32(1.0)
    xyz *= noise[:, None]
    return frame.with_points(points)
