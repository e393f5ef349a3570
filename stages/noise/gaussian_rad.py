"""Gaussian noise on the range of every point (KITTI-C `gaussian_rad`, Li et al. Appendix C-A).

Models ranging noise of the sensor (strong illumination lowering the SNR, vibration): each point
moves along its own ray by r' = r + N(0, σ²); azimuth and elevation are unchanged. Intensity and
any extra columns are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.geometry import scale_range
from stages.registry import stage


@dataclass(frozen=True)
class GaussianRadParams:
    sigma: float  # standard deviation of the range noise, metres


@stage("gaussian_rad", params=GaussianRadParams)
def gaussian_rad(frame: Frame, params: GaussianRadParams, rng: np.random.Generator) -> Frame:
    if params.sigma < 0:
        raise ValueError(f"gaussian_rad: sigma must be ≥ 0, got {params.sigma}")
    r = np.linalg.norm(frame.xyz.astype(np.float64), axis=1)
    noise = rng.normal(0.0, params.sigma, size=len(frame)) if params.sigma > 0 else 0.0
    points = frame.points.copy()
    points[:, :3] = scale_range(frame.xyz, r + noise)
    return frame.with_points(points)
