"""Add K noise points uniformly inside the unit ball (ModelNet-C "Add-Global", Ren et al. Appendix A).

Models outliers scattered around the shape. r = U(0,1)^(1/3), cos θ ~ U(−1, 1), φ ~ U(0, 2π), so
the points are uniform in the ball of radius 1; appended after the shape's points and tagged
``SYNTHETIC``. K = 10 … 50.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.registry import stage
from bench_build.stages.whole_shape import unit_ball


@dataclass(frozen=True)
class ObjectAddGlobalParams:
    points: int  # K: points added


@stage("object_add_global", params=ObjectAddGlobalParams)
def object_add_global(frame: Frame, params: ObjectAddGlobalParams, rng: np.random.Generator) -> Frame:
    if params.points < 0:
        raise ValueError(f"object_add_global: points must be ≥ 0, got {params.points}")
    new = np.zeros((params.points, frame.points.shape[1]), np.float32)
    new[:, :3] = unit_ball(rng, params.points)
    return frame.append(new, PointTag.SYNTHETIC)
