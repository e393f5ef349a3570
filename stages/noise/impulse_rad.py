"""Impulse noise on the range of a fraction of points (KITTI-C `impulse_rad`, Li et al. Appendix C-A).

Models sporadic gross ranging errors: ⌊N / d⌋ of the N points (d = 30, 25, 20, 15, 10 at severities
1–5), chosen uniformly without replacement, move along their own ray by exactly ±0.2 m, the sign drawn
independently and with equal probability for each point ("deterministic perturbations of +/−0.2 m").
Decisions the paper leaves open: the sign is a fair coin per point; intensity and extra columns are
kept; the range is not clamped (a point closer than the magnitude would be flipped through the
sensor, which does not occur on KITTI); the point count is unchanged and points keep their order.
``rule = "code"`` (default, the released generator behind the published numbers) multiplies the
magnitude by √3 and the recipe's code table uses 0.4 m, i.e. ±0.4·√3 = ±0.693 m; ``rule = "text"`` is ±0.2 m.
count_divisor = inf, magnitude = 0 or a count that rounds to 0 return the input frame unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import range_factor
from bench_build.stages.kernels.spherical import scale_range
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ImpulseRadParams:
    count_divisor: float  # perturb floor(N / count_divisor) points; inf perturbs none
    magnitude: float = 0.2  # metres added to or subtracted from the range (before the rule's factor)
    rule: str = "code"  # "code": magnitude·√3 as Li et al.'s released generator; "text": magnitude, Appendix C


@stage("impulse_rad", params=ImpulseRadParams, version=2)  # v2: rule (code: ×√3)
def impulse_rad(frame: Frame, params: ImpulseRadParams, rng: np.random.Generator) -> Frame:
    if not params.count_divisor > 0:
        raise ValueError(f"impulse_rad: count_divisor must be > 0, got {params.count_divisor}")
    if not (params.magnitude >= 0 and math.isfinite(params.magnitude)):
        raise ValueError(f"impulse_rad: magnitude must be a finite value ≥ 0, got {params.magnitude}")
    mag = params.magnitude * range_factor(params.rule, "impulse_rad")
    n = len(frame)
    n_hit = 0 if math.isinf(params.count_divisor) else min(n, int(n // params.count_divisor))
    if n_hit == 0 or params.magnitude == 0:
        return frame
    idx = rng.choice(n, size=n_hit, replace=False)
    sign = rng.integers(0, 2, size=n_hit) * 2.0 - 1.0
    xyz = frame.xyz[idx].astype(np.float64)
    r = np.linalg.norm(xyz, axis=1)
    points = frame.points.copy()
    points[idx, :3] = scale_range(xyz, r + sign * mag)
    return frame.with_points(points)
