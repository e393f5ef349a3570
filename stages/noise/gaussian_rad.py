"""Gaussian noise on the range of every point (KITTI-C `gaussian_rad`, Li et al. Appendix C-A).

Models ranging noise of the sensor (strong illumination lowering the SNR, vibration): each point
moves along its own ray by r' = r + N(0, σ²); azimuth and elevation are unchanged. Intensity and
any extra columns are kept.

``rule = "code"`` (default) follows the released generator that produced the published numbers:
it multiplies the drawn noise by √3, so the range σ is σ·√3 (0.069 … 0.208 m). ``rule = "text"``
is the appendix's σ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import range_factor
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class GaussianRadParams:
    sigma: float  # standard deviation of the range noise, metres (before the rule's factor)
    rule: str = "code"  # "code": σ·√3 as Li et al.'s released generator; "text": σ as Appendix C says


@stage("gaussian_rad", params=GaussianRadParams, version=3)  # v2: rule (code: ×√3); v3: float32 in place
def gaussian_rad(frame: Frame, params: GaussianRadParams, rng: np.random.Generator) -> Frame:
    if params.sigma < 0:
        raise ValueError(f"gaussian_rad: sigma must be ≥ 0, got {params.sigma}")
    sigma = params.sigma * range_factor(params.rule, "gaussian_rad")
    if sigma == 0 or len(frame) == 0:
        return frame
    # move along the ray, xyz · (r + n) / r, in place on the float32 copy (relative error ~1e-7, i.e.
    # micrometres, far below σ); points at the origin stay
    points = frame.points.copy()
    xyz = points[:, :3]
    r = np.sqrt(np.einsum("ij,ij->i", xyz, xyz))
    noise = rng.standard_normal(len(frame), dtype=np.float32)
    noise *= np.float32(sigma)
    np.divide(noise, r, out=noise, where=r > 0)
    noise += np.float32(1.0)
    xyz *= noise[:, None]
    return frame.with_points(points)
