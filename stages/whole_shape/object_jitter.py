"""Gaussian jitter of every coordinate (ModelNet-C "Jitter", Ren et al. Appendix A).

Models sensor noise on a reconstructed shape: p' = p + σ·N(0, I), σ = 0.01 … 0.05, no clipping
and no renormalisation (as the released generator). Every point is tagged ``JITTER``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ObjectJitterParams:
    sigma: float  # standard deviation per coordinate (unit-sphere units)


@stage("object_jitter", params=ObjectJitterParams)
def object_jitter(frame: Frame, params: ObjectJitterParams, rng: np.random.Generator) -> Frame:
    if params.sigma < 0:
        raise ValueError(f"object_jitter: sigma must be ≥ 0, got {params.sigma}")
    if params.sigma == 0:
        return frame
    points = frame.points.copy()
    points[:, :3] = frame.xyz.astype(np.float64) + params.sigma * rng.standard_normal((len(frame), 3))
    return frame.with_points(points, point_tag=np.full(len(frame), PointTag.JITTER, np.uint8))
